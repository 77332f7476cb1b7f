/**
 * What runs in a bwrap session's sandbox (backend.ts): its apps, on a PTY or
 * pipes, each through the launch chain (launch.ts) or, for the first PTY app
 * of a sandbox taken from the warm pool, on the chain already waiting there
 * (warm-pool.ts); its setup and init scripts; and the relay that is its
 * gateway.
 */
import { createServer, connect, type Server } from "node:net";
import { join } from "node:path";
import { spawn as spawnPty } from "@lydell/node-pty";
import { INITIAL_TERMINAL_SIZE } from "@paddock/contracts";
import { SpawnError } from "../../errors.ts";
import type { CommandResult, SandboxApp, SandboxCommand, SandboxScript, ScriptOutcome } from "../backend.ts";
import { resolveExecutable } from "../executable.ts";
import { spawnPiped } from "../pipe-app.ts";
import { exitThroughSandbox, OutputStream, withSandboxExits, type AppProcess } from "../process-group.ts";
import { OutputTail } from "../output-tail.ts";
import { wrapPty } from "../pty-app.ts";
import type { ExecHolder } from "./exec-holder.ts";
import { imageCommandExists } from "./image-root.ts";
import { openEnvFile, type EnvFile } from "./launch-env.ts";
import { sandboxLaunch, type BwrapTools, type SandboxSpec } from "./launch.ts";
import { signalTree } from "./session-processes.ts";
import type { Waiter } from "./warm-pool.ts";
import { coldStartEnv, PTY_SPAWN } from "./warm-script.ts";

export type SpecOf = (command: readonly string[], env: Record<string, string>, tty: boolean) => SandboxSpec;

/** How an app started: on a warm sandbox's waiting chain, or through a launch of its own (and why). */
export type AppStart = { start: "warm" } | { start: "cold"; reason: string };

export interface AppContext {
  spec: SpecOf;
  tools: BwrapTools;
  /** The workspace on the host, and where the session sees it (its cwd). */
  workspace: { host: string; inside: string };
  /** The image's root on the host; undefined: the host's root. */
  rootfs: string | undefined;
  /** The warm sandbox's waiter, for the first app only (undefined afterwards, and on a cold create: `coldReason` says why). */
  takeWaiter(): Waiter | undefined;
  coldReason: string;
  onStart(start: AppStart): void;
}

export function startApp(opts: SandboxApp, ctx: AppContext): AppProcess {
  const [command] = opts.app.cmd;
  if (!command) throw new SpawnError(`app ${opts.app.name}: empty command`);
  const { workspace, rootfs } = ctx;
  // What the session would exec is found here first (the workspace as the host sees it; the image's root, or the host's).
  const inWorkspace = command === workspace.inside || command.startsWith(`${workspace.inside}/`);
  const onHost = inWorkspace ? join(workspace.host, command.slice(workspace.inside.length)) : command;
  const found = rootfs && !inWorkspace ? imageCommandExists(rootfs, command, opts.env.PATH ?? "") : resolveExecutable(onHost, workspace.host, opts.env.PATH ?? "");
  if (!found) throw new SpawnError(`app ${opts.app.name}: command not found: ${command.slice(0, 128)}`);
  const tty = opts.app.tty !== false;
  const waiter = ctx.takeWaiter();
  let coldReason = waiter ? "piped app" : ctx.coldReason;
  if (waiter && tty) {
    const pty = waiter.claim({ command: opts.app.cmd, env: coldStartEnv(opts.env, workspace.inside), cwd: workspace.inside }, opts.size);
    if (pty) {
      ctx.onStart({ start: "warm" });
      return withSandboxExits(wrapPty(opts.app.name, pty, opts.onData, signalTree));
    }
    coldReason = "declined by its waiter";
  } else waiter?.dispose(coldReason);
  ctx.onStart({ start: "cold", reason: coldReason });
  // A terminal's TERM, as node-pty would set it: nothing of the spawn's own environment reaches the app (launch.ts).
  const base = ctx.spec(opts.app.cmd, tty ? { ...opts.env, TERM: PTY_SPAWN.name } : opts.env, tty);
  const spec = opts.cwd ? { ...base, cwd: join(workspace.inside, opts.cwd) } : base;
  return withEnvFile(spec, `app ${opts.app.name}: could not start ${command.slice(0, 128)}`, (envFrom) => {
    const launch = sandboxLaunch(spec, ctx.tools, envFrom);
    if (!tty) return withSandboxExits(spawnPiped({ name: opts.app.name, file: launch.file, args: launch.args, cwd: "/", env: launch.env, onData: opts.onData, signal: signalTree }));
    const size = opts.size ?? INITIAL_TERMINAL_SIZE;
    const pty = spawnPty(launch.file, launch.args, { ...PTY_SPAWN, cols: size.cols, rows: size.rows, env: launch.env, encoding: null });
    return withSandboxExits(wrapPty(opts.app.name, pty, opts.onData, signalTree));
  });
}

/**
 * An exec'd command as a fork of the session's exec init (exec-holder.ts),
 * found first where startApp looks; its cwd and PWD are the workspace's
 * subdirectory opts.cwd (checked by the caller), as bwrap's chdir gives apps.
 */
export function startExec(opts: SandboxApp, holder: ExecHolder, where: Pick<AppContext, "workspace" | "rootfs">): AppProcess {
  const [command] = opts.app.cmd;
  if (command === undefined || !commandExists(command, opts.env.PATH ?? "", where)) throw new SpawnError(`app ${opts.app.name}: command not found: ${(command ?? "").slice(0, 128)}`);
  const cwd = opts.cwd ? join(where.workspace.inside, opts.cwd) : where.workspace.inside;
  return holder.start({ name: opts.app.name, argv: opts.app.cmd, env: { ...opts.env, PWD: cwd }, cwd, onData: (bytes, stream) => opts.onData(bytes, stream) });
}

/** Starts a process with spec's environment in a file (launch-env.ts), freed once the process ended or failed to start. */
function withEnvFile(spec: SandboxSpec, failure: string, start: (envFrom: string) => AppProcess): AppProcess {
  let envFile: EnvFile;
  try {
    envFile = openEnvFile(spec.env);
  } catch {
    throw new SpawnError(failure);
  }
  try {
    const proc = start(envFile.path);
    void proc.exited.finally(() => envFile.close());
    return proc;
  } catch (err) {
    envFile.close();
    throw err instanceof SpawnError ? err : new SpawnError(failure);
  }
}

export function runScript(opts: SandboxScript, spec: SpecOf, tools: BwrapTools): Promise<ScriptOutcome> {
  return runToEnd(["/bin/sh", "-c", opts.script], opts, spec, tools, undefined);
}

/**
 * Runs an argv in the sandbox like a script (Sandbox.runCommand), keeping its
 * stderr's tail; its executable is looked for first where startApp looks
 * (the image's root or the host's, on the session's PATH), so a missing one
 * is `not_found` rather than bwrap's exec error.
 */
export async function runCommand(opts: SandboxCommand, spec: SpecOf, tools: BwrapTools, where: Pick<AppContext, "workspace" | "rootfs">): Promise<CommandResult> {
  const [command] = opts.argv;
  if (command === undefined || !commandExists(command, opts.env.PATH ?? "", where)) return { outcome: { kind: "not_found" }, stderrTail: "" };
  const tail = new OutputTail();
  const outcome = await runToEnd(opts.argv, opts, spec, tools, tail);
  return { outcome, stderrTail: tail.text() };
}

function commandExists(command: string, path: string, { workspace, rootfs }: Pick<AppContext, "workspace" | "rootfs">): boolean {
  const inWorkspace = command === workspace.inside || command.startsWith(`${workspace.inside}/`);
  const onHost = inWorkspace ? join(workspace.host, command.slice(workspace.inside.length)) : command;
  return rootfs && !inWorkspace ? imageCommandExists(rootfs, command, path) : resolveExecutable(onHost, workspace.host, path) !== undefined;
}

/** Output discarded (never logged: it may print secrets), as the process backend's; stderr's tail kept when asked for. */
function runToEnd(argv: readonly string[], opts: Omit<SandboxScript, "script">, spec: SpecOf, tools: BwrapTools, stderr: OutputTail | undefined): Promise<ScriptOutcome> {
  if (opts.signal?.aborted) return Promise.resolve({ kind: "aborted" });
  const scriptSpec = spec(argv, opts.env, false);
  let cause: "timeout" | "aborted" | undefined;
  let proc: AppProcess;
  try {
    proc = withEnvFile(scriptSpec, "script: could not start", (envFrom) => {
      const launch = sandboxLaunch(scriptSpec, tools, envFrom);
      const onData = (bytes: Uint8Array, stream: OutputStream) => {
        if (stream === OutputStream.stderr) stderr?.push(bytes);
      };
      return spawnPiped({ name: "script", file: launch.file, args: launch.args, cwd: "/", env: launch.env, onData, signal: signalTree });
    });
  } catch {
    return Promise.resolve({ kind: "spawn_error" });
  }
  proc.input.close();
  const kill = (why: "timeout" | "aborted") => {
    cause ??= why;
    signalTree(proc.pid, "SIGKILL");
  };
  const timer = setTimeout(() => kill("timeout"), opts.timeoutMs);
  const onAbort = () => kill("aborted");
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  return proc.exited.then(exitThroughSandbox).then((exit) => {
    clearTimeout(timer);
    opts.signal?.removeEventListener("abort", onAbort);
    if (cause) return { kind: cause };
    if (exit.exitCode === 0) return { kind: "ok" };
    return { kind: "exit", exitCode: exit.exitCode, signal: exit.signal };
  });
}

/** A TCP relay on host (the runner's end of a session's link) to the gateway: the session's PADDOCK_URL. */
export function startRelay(host: string, target: URL, listenPort: number): Promise<Server> {
  const port = Number(target.port || (target.protocol === "https:" ? 443 : 80));
  const server = createServer((client) => {
    const upstream = connect(port, target.hostname);
    client.pipe(upstream).pipe(client);
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end);
    upstream.on("error", end);
    client.once("close", end);
    upstream.once("close", end);
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(listenPort, host, () => {
      server.off("error", reject);
      resolve(server);
    });
  });
}
