/**
 * One Paddock session as the framework's sandbox session: commands through
 * Paddock's exec (buffered: the interface answers a command's whole result),
 * files through its files API, exposed ports as preview URLs, and close as
 * deleting (or suspending) the session. Paths are resolved against the
 * manifest root, which is the session's workspace as its sandbox sees it.
 */
import type { Paddock } from "@paddock/sdk";
import type { ToolOutputImage } from "@openai/agents";
import {
  SandboxExecNonZeroError,
  SandboxExecTimeoutError,
  SandboxExposedPortUnavailableError,
  SandboxLifecycleError,
  type ExecCommandArgs,
  type ExposedPortEndpoint,
  type ListDirectoryArgs,
  type Manifest,
  type MaterializeEntryArgs,
  type ReadFileArgs,
  type SandboxDirectoryEntry,
  type SandboxExecResult,
  type SandboxSession,
  type SandboxSessionState,
  type ViewImageArgs,
} from "@openai/agents/sandbox";
import { PaddockEditor } from "./editor.ts";
import { Operation, paddockCall, PROVIDER, unsupported } from "./errors.ts";
import { materialize, planEntries } from "./manifest.ts";
import { formatExecResponse, imageMediaType, truncateOutput } from "./output.ts";
import { absoluteOf, baseName, workspaceRelative } from "./paths.ts";

/** What closing a session does to the Paddock session: delete it (default), or suspend it to resume later. */
export const OnClose = { delete: "delete", suspend: "suspend" } as const;
export type OnClose = (typeof OnClose)[keyof typeof OnClose];

export interface PaddockSandboxSessionState extends SandboxSessionState {
  /** The Paddock session's id: all it takes to reconnect (`client.resume`). */
  sessionId: string;
  environment: Record<string, string>;
  configuredExposedPorts: number[];
  /** A command's time limit (Paddock's default, 60 s, when absent). */
  commandTimeoutMs?: number;
  onClose: OnClose;
}

/** The largest image view_image reads (the framework's own limit). */
const MAX_IMAGE_BYTES = 10 * 1024 * 1024;
const TERMINAL_STATES: ReadonlySet<string> = new Set(["canceled", "failed", "dead", "destroyed"]);

export class PaddockSandboxSession implements SandboxSession<PaddockSandboxSessionState> {
  private released: Promise<void> | undefined;

  constructor(
    readonly state: PaddockSandboxSessionState,
    private readonly paddock: Paddock,
  ) {}

  get sessionId(): string {
    return this.state.sessionId;
  }

  supportsPty(): boolean {
    return false;
  }

  // --- lifecycle ---

  async running(): Promise<boolean> {
    if (this.released) return false;
    const s = await paddockCall(Operation.session, { sessionId: this.sessionId }, () => this.paddock.sessions.get(this.sessionId));
    return s.state === "running";
  }

  /** Resumes a suspended session (the runtime calls this when `running()` is false); a session that ended cannot start again. */
  async start(): Promise<void> {
    this.assertUsable();
    const s = await paddockCall(Operation.session, { sessionId: this.sessionId }, () => this.paddock.sessions.get(this.sessionId));
    if (s.state === "running") return;
    if (TERMINAL_STATES.has(s.state)) throw new SandboxLifecycleError(`Paddock session ${this.sessionId} has ended (${s.state}).`, { provider: PROVIDER, sessionId: this.sessionId, state: s.state });
    const r = await paddockCall(Operation.session, { sessionId: this.sessionId }, () => this.paddock.sessions.resume(this.sessionId, { wait: "running" }));
    if (r.waited?.outcome !== "reached") throw new SandboxLifecycleError(`Paddock session ${this.sessionId} did not run again (${r.state}).`, { provider: PROVIDER, sessionId: this.sessionId, state: r.state });
  }

  /** Ends the session as `onClose` says (delete, or suspend); once, however often it is called. */
  delete(): Promise<void> {
    this.released ??= this.release();
    return this.released;
  }

  close(): Promise<void> {
    return this.delete();
  }

  private async release(): Promise<void> {
    const id = this.sessionId;
    if (this.state.onClose === OnClose.suspend) {
      await paddockCall(Operation.session, { sessionId: id }, () => this.paddock.sessions.suspend(id, false, { wait: "suspended_cold" }));
      return;
    }
    await paddockCall(Operation.session, { sessionId: id }, () => this.paddock.sessions.delete(id, { wait: "destroyed" }));
  }

  private assertUsable(): void {
    if (this.released) throw new SandboxLifecycleError(`Paddock session ${this.sessionId} was closed.`, { provider: PROVIDER, sessionId: this.sessionId });
  }

  // --- commands ---

  async exec(args: ExecCommandArgs): Promise<SandboxExecResult> {
    this.assertUsable();
    if (args.runAs) throw unsupported("exec.runAs", "runAs is not supported: commands run as the session's own user.");
    if (args.tty) throw unsupported("exec.tty", "tty=true is not supported: exec runs without a terminal (use the session's terminal for one).");
    const cwd = workspaceRelative(this.state.manifest.root, args.workdir);
    // The framework's shell tool asks for a login shell by default; `sh` is in every image, bash is not.
    const cmd = [args.shell ?? "sh", args.login === false ? "-c" : "-lc", args.cmd];
    const env = Object.keys(this.state.environment).length > 0 ? this.state.environment : undefined;
    const timeoutMs = this.state.commandTimeoutMs;
    const r = await paddockCall(Operation.exec, { sessionId: this.sessionId, cmd: args.cmd }, () =>
      this.paddock.exec.run(this.sessionId, { cmd, ...(cwd ? { cwd } : {}), ...(env ? { env } : {}), ...(timeoutMs !== undefined ? { timeoutMs } : {}) }),
    );
    if (r.timedOut) {
      throw new SandboxExecTimeoutError(`Command timed out after ${r.durationMs} ms: ${args.cmd}`, { provider: PROVIDER, sessionId: this.sessionId, cmd: args.cmd, timeoutMs, stdout: r.stdout, stderr: r.stderr });
    }
    // Buffered exec keeps stdout and stderr apart; the tool's single output is stdout, then stderr.
    let combined = r.stdout + r.stderr;
    if (r.truncated) combined += "\n[output past Paddock's 1 MiB cap was dropped]";
    if (r.signal) combined += `\n[killed by ${r.signal}]`;
    const out = truncateOutput(combined, args.maxOutputTokens);
    return { output: out.text, stdout: r.stdout, stderr: r.stderr, wallTimeSeconds: r.durationMs / 1000, exitCode: r.exitCode, ...(out.originalTokenCount !== undefined ? { originalTokenCount: out.originalTokenCount } : {}) };
  }

  async execCommand(args: ExecCommandArgs): Promise<string> {
    const r = await this.exec(args);
    return formatExecResponse({ output: r.output, wallTimeSeconds: r.wallTimeSeconds, exitCode: r.exitCode, originalTokenCount: r.originalTokenCount });
  }

  /**
   * The adapter's own commands (probes, mkdir): argv in the workspace. A
   * timeout is SandboxExecTimeoutError and an exit outside `allowed` is
   * SandboxExecNonZeroError (the model's commands answer their exit code instead).
   */
  private async runChecked(argv: string[], allowed: readonly number[] = [0]): Promise<number> {
    const details = { provider: PROVIDER, sessionId: this.sessionId, cmd: argv.join(" ") };
    const r = await paddockCall(Operation.exec, details, () => this.paddock.exec.run(this.sessionId, { cmd: argv }));
    if (r.timedOut) throw new SandboxExecTimeoutError(`${argv[0]} timed out after ${r.durationMs} ms`, details);
    if (r.exitCode === null || !allowed.includes(r.exitCode)) {
      throw new SandboxExecNonZeroError(`${argv[0]} exited with ${r.exitCode ?? r.signal}: ${r.stderr.trim()}`, { ...details, exitCode: r.exitCode, signal: r.signal, stderr: r.stderr });
    }
    return r.exitCode;
  }

  // --- files ---

  private rel(path: string, runAs?: string): string {
    this.assertUsable();
    if (runAs) throw unsupported("files.runAs", "runAs is not supported: files are read and written as the session's own user.");
    return workspaceRelative(this.state.manifest.root, path);
  }

  async readFile(args: ReadFileArgs): Promise<Uint8Array> {
    const path = this.rel(args.path, args.runAs);
    const bytes = await paddockCall(Operation.read, { sessionId: this.sessionId, path: args.path }, () => this.paddock.files.read(this.sessionId, path));
    return args.maxBytes !== undefined && bytes.byteLength > args.maxBytes ? bytes.subarray(0, args.maxBytes) : bytes;
  }

  async readText(path: string): Promise<string> {
    return new TextDecoder().decode(await this.readFile({ path }));
  }

  /** Writes a file (its missing parents too). Not in the framework's interface: Paddock's own, for callers driving the session. */
  async writeFile(path: string, content: string | Uint8Array): Promise<void> {
    const rel = this.rel(path);
    await paddockCall(Operation.write, { sessionId: this.sessionId, path }, () => this.paddock.files.write(this.sessionId, rel, content));
  }

  /** Removes a file or directory. Not in the framework's interface: Paddock's own. */
  async removeFile(path: string): Promise<void> {
    const rel = this.rel(path);
    await paddockCall(Operation.remove, { sessionId: this.sessionId, path }, () => this.paddock.files.remove(this.sessionId, rel));
  }

  async listDir(args: ListDirectoryArgs): Promise<SandboxDirectoryEntry[]> {
    const path = this.rel(args.path, args.runAs);
    const list = await paddockCall(Operation.list, { sessionId: this.sessionId, path: args.path }, () => this.paddock.files.list(this.sessionId, path));
    const root = this.state.manifest.root;
    return list.entries.map((e) => ({ name: baseName(e.path), path: absoluteOf(root, e.path), type: e.type === "symlink" ? "other" : e.type }));
  }

  async pathExists(path: string, runAs?: string): Promise<boolean> {
    return (await this.runChecked(["test", "-e", this.rel(path, runAs) || "."], [0, 1])) === 0;
  }

  async directoryExists(path: string, runAs?: string): Promise<boolean> {
    return (await this.runChecked(["test", "-d", this.rel(path, runAs) || "."], [0, 1])) === 0;
  }

  createEditor(runAs?: string): PaddockEditor {
    if (runAs) throw unsupported("editor.runAs", "runAs is not supported: files are written as the session's own user.");
    return new PaddockEditor(this);
  }

  async viewImage(args: ViewImageArgs): Promise<ToolOutputImage> {
    const bytes = await this.readFile({ path: args.path, ...(args.runAs !== undefined ? { runAs: args.runAs } : {}) });
    if (bytes.byteLength > MAX_IMAGE_BYTES) throw unsupported("view_image.size", `image ${args.path} exceeds the 10 MB limit.`);
    const mediaType = imageMediaType(bytes);
    if (!mediaType) throw unsupported("view_image.format", `${args.path} is not a supported image (png, jpeg, gif, webp).`);
    return { type: "image", image: { data: Uint8Array.from(bytes), mediaType } };
  }

  // --- manifest ---

  async materializeEntry(args: MaterializeEntryArgs): Promise<void> {
    const path = this.rel(args.path, args.runAs);
    await this.applyPlan(planEntries({ [path || "."]: args.entry }, { reposAllowed: false }));
  }

  async applyManifest(manifest: Manifest, runAs?: string): Promise<void> {
    if (runAs) throw unsupported("manifest.runAs", "runAs is not supported.");
    await this.applyPlan(planEntries(manifest.entries, { reposAllowed: false }));
  }

  /** Writes a plan's directories (one mkdir) and files. */
  async applyPlan(plan: ReturnType<typeof planEntries>): Promise<void> {
    this.assertUsable();
    await materialize(plan, {
      mkdirs: async (dirs) => {
        await this.runChecked(["mkdir", "-p", "--", ...dirs]);
      },
      write: (path, content) => this.writeFile(path, content),
    });
  }

  // --- ports ---

  /** A declared port's preview URL (private: it takes the bearer token or a preview ticket). `url` has its path: use it, not host:port alone. */
  async resolveExposedPort(port: number): Promise<ExposedPortEndpoint> {
    this.assertUsable();
    if (!this.state.configuredExposedPorts.includes(port)) {
      throw new SandboxExposedPortUnavailableError(`Port ${port} was not declared: pass it in exposedPorts when creating the session.`, { provider: PROVIDER, port, exposedPorts: this.state.configuredExposedPorts });
    }
    const s = await paddockCall(Operation.ports, { sessionId: this.sessionId, port }, () => this.paddock.sessions.get(this.sessionId));
    const declared = s.ports?.find((p) => p.port === port);
    if (!declared) throw new SandboxExposedPortUnavailableError(`Paddock session ${this.sessionId} has no preview for port ${port}.`, { provider: PROVIDER, port });
    const url = new URL(declared.url, this.paddock.transport.baseUrl);
    const tls = url.protocol === "https:";
    const endpoint: ExposedPortEndpoint = { host: url.hostname, port: Number(url.port || (tls ? 443 : 80)), tls, url: url.href };
    this.state.exposedPorts = { ...this.state.exposedPorts, [String(port)]: endpoint };
    return endpoint;
  }
}
