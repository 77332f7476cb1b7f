/**
 * `PaddockSandboxClient`: the OpenAI Agents SDK's sandbox client over
 * Paddock. Creating a sandbox session creates a Paddock session (environment,
 * image and spec passed through), waits until it runs, and materialises the
 * manifest; resuming reconnects by session id (resuming a suspended one);
 * deleting deletes it.
 */
import type { CreateSessionInput, Paddock } from "@paddock/sdk";
import {
  Manifest,
  SandboxLifecycleError,
  normalizeSandboxClientCreateArgs,
  type SandboxClient,
  type SandboxClientCreateArgs,
  type SandboxClientOptions,
} from "@openai/agents/sandbox";
import { Operation, paddockCall, PROVIDER, unsupported } from "./errors.ts";
import { assertManifestSupported, planEntries } from "./manifest.ts";
import { OnClose, PaddockSandboxSession, type PaddockSandboxSessionState } from "./session.ts";

export interface PaddockSandboxClientOptions extends SandboxClientOptions {
  /** A Paddock environment to create the session from (its image, repos, secrets, policies). */
  environmentId?: string;
  /** The session's spec (image, cmd, apps, egressAllow, repos, …), over the environment's. */
  spec?: CreateSessionInput["spec"];
  /** A name for the session (unique in the workspace). */
  name?: string;
  /** The session ends this long after its create, whatever happens (Paddock's maxLifetimeMs). */
  maxLifetimeMs?: number;
  /** Ports given a preview URL (`resolveExposedPort`); private: the bearer token or a preview ticket opens them. */
  exposedPorts?: number[];
  /** A command's time limit (Paddock's default, 60 s, when absent). */
  commandTimeoutMs?: number;
  /** How long a create waits for the session to run (default 60 s, at most 300 s). */
  createTimeoutMs?: number;
  /** What closing the sandbox session does: delete the Paddock session (default) or suspend it. */
  onClose?: OnClose;
}

const DEFAULT_CREATE_TIMEOUT_MS = 60_000;
/** What a session runs when nothing else names a command: it only has to stay up for exec and files. */
const KEEP_ALIVE_CMD = ["sh", "-c", "while :; do sleep 3600; done"];

/** The manifest with the Paddock workspace as its root: where the session's workspace is, its sandbox decides. */
function withRoot(manifest: Manifest, root: string): Manifest {
  return new Manifest({
    version: manifest.version,
    root,
    entries: structuredClone(manifest.entries),
    environment: Object.fromEntries(Object.entries(manifest.environment).map(([k, v]) => [k, v.init()])),
    remoteMountCommandAllowlist: [...manifest.remoteMountCommandAllowlist],
  });
}

function createBody(o: PaddockSandboxClientOptions, repos: ReturnType<typeof planEntries>["repos"]): CreateSessionInput {
  const spec = { ...o.spec };
  if (repos.length > 0) spec.repos = [...(spec.repos ?? []), ...repos];
  if (o.exposedPorts?.length) spec.ports = [...(spec.ports ?? []), ...o.exposedPorts.map((port) => ({ port }))];
  if (!o.environmentId && !spec.cmd && !spec.apps) spec.cmd = KEEP_ALIVE_CMD;
  return {
    spec,
    ...(o.environmentId !== undefined ? { environmentId: o.environmentId } : {}),
    ...(o.name !== undefined ? { name: o.name } : {}),
    ...(o.maxLifetimeMs !== undefined ? { maxLifetimeMs: o.maxLifetimeMs } : {}),
  };
}

export class PaddockSandboxClient implements SandboxClient<PaddockSandboxClientOptions, PaddockSandboxSessionState> {
  readonly backendId = "paddock";
  private readonly paddock: Paddock;
  private readonly defaults: PaddockSandboxClientOptions;

  /** `paddock`: the SDK client sessions are made with; the rest are defaults a run's `sandbox.options` override. */
  constructor(opts: PaddockSandboxClientOptions & { paddock: Paddock }) {
    const { paddock, ...defaults } = opts;
    this.paddock = paddock;
    this.defaults = defaults;
  }

  async create(args?: SandboxClientCreateArgs<PaddockSandboxClientOptions> | Manifest, manifestOptions?: PaddockSandboxClientOptions): Promise<PaddockSandboxSession> {
    const { manifest, options, snapshot } = normalizeSandboxClientCreateArgs(args, manifestOptions);
    if (snapshot && snapshot.type !== "noop") throw unsupported("snapshot", `snapshot specs (${snapshot.type}) are not supported: suspend and resume the Paddock session instead.`);
    const o: PaddockSandboxClientOptions = { ...this.defaults, ...options };
    // Everything is checked before anything is created.
    assertManifestSupported(manifest);
    const plan = planEntries(manifest.entries, { reposAllowed: true });
    const environment = await manifest.resolveEnvironment();
    const timeoutMs = o.createTimeoutMs ?? DEFAULT_CREATE_TIMEOUT_MS;
    const created = await paddockCall(Operation.create, {}, () => this.paddock.sessions.create(createBody(o, plan.repos), { wait: "running", timeoutMs }));
    const session = new PaddockSandboxSession(
      {
        manifest,
        sessionId: created.id,
        environment,
        configuredExposedPorts: o.exposedPorts ?? [],
        onClose: o.onClose ?? OnClose.delete,
        ...(o.commandTimeoutMs !== undefined ? { commandTimeoutMs: o.commandTimeoutMs } : {}),
      },
      this.paddock,
    );
    try {
      if (created.waited?.outcome !== "reached") {
        throw new SandboxLifecycleError(`Paddock session ${created.id} did not reach running (${created.state}, ${created.waited?.outcome ?? "no wait"})${created.error ? `: ${created.error}` : ""}.`, { provider: PROVIDER, sessionId: created.id, state: created.state, error: created.error });
      }
      session.state.manifest = withRoot(manifest, await this.workspaceRoot(created.id));
      await session.applyPlan({ ...plan, repos: [] });
    } catch (err) {
      // A session that cannot be used is not left running.
      await this.paddock.sessions.delete(created.id).catch(() => undefined);
      throw err;
    }
    return session;
  }

  /** Reconnects to the session of `state` (the runtime then starts it again if it was suspended). */
  async resume(state: PaddockSandboxSessionState): Promise<PaddockSandboxSession> {
    await paddockCall(Operation.session, { sessionId: state.sessionId }, () => this.paddock.sessions.get(state.sessionId));
    return new PaddockSandboxSession(state, this.paddock);
  }

  /** Deletes the session of `state`, whatever its `onClose`. */
  async delete(state: PaddockSandboxSessionState): Promise<void> {
    await paddockCall(Operation.session, { sessionId: state.sessionId }, () => this.paddock.sessions.delete(state.sessionId, { wait: "destroyed" }));
  }

  /** The workspace's path as the session's sandbox sees it (exec's default directory). */
  private async workspaceRoot(sessionId: string): Promise<string> {
    const r = await paddockCall(Operation.exec, { sessionId }, () => this.paddock.exec.run(sessionId, { cmd: ["pwd"] }));
    const root = r.stdout.trim();
    if (r.exitCode !== 0 || !root.startsWith("/")) throw new SandboxLifecycleError(`Paddock session ${sessionId}: could not find its workspace (${r.stderr.trim()}).`, { provider: PROVIDER, sessionId });
    return root;
  }
}
