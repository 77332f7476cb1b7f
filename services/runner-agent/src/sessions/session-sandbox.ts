/**
 * A session placement's sandbox below its apps: the first boot steps (asks
 * for its credentials, makes and restores its workspace, starts its egress
 * proxy, builds its environment), its egress proxy's lifetime, and its
 * checkpoint saves. SessionRuntime.boot starts the apps on what this prepares.
 */
import type { HeldSession } from "@paddock/contracts";
import { bootEnvironment } from "./boot.ts";
import { checkpointObjectName, type SavedCheckpoint } from "../workspace/checkpoint.ts";
import { cloneRepos } from "../workspace/repos.ts";
import { egressEnv, egressRefusals, startEgressProxy, type EgressProxy } from "../sandbox/egress.ts";
import type { Sandbox, SandboxUser } from "../sandbox/backend.ts";
import { BootError, CheckpointError, CommandRefusedError } from "../errors.ts";
import type { FactBody } from "../fleet/facts.ts";
import { baseEnv, tokenEnv } from "./app-wiring.ts";
import type { SessionRuntimeDeps, StartCommand } from "./session-deps.ts";

export interface SandboxPrep {
  deps: SessionRuntimeDeps;
  cmd: StartCommand;
  held: HeldSession;
  sandbox: Sandbox;
  /** The session's secret values and service token, asked for before the sandbox was created (askCredentials). */
  credentials: Promise<BootCredentials>;
  signal: AbortSignal;
  /** Starts the session's egress proxy listening on host (on port when free); answers its port and the env that points apps at it. */
  startEgress: (host: string, port: number) => Promise<StartedEgress>;
  emit: (body: FactBody, key?: string) => Promise<boolean>;
  logFields: Record<string, unknown>;
}

export type BootCredentials = Awaited<ReturnType<SessionRuntimeDeps["secrets"]["boot"]>>;

/**
 * Secret values and the service token (never in DISPATCH): a round trip to
 * the scheduler, asked for first so that it overlaps the sandbox's creation
 * and preparation. Awaited by prepareSandbox (a rejection is handled there).
 */
export function askCredentials(deps: SessionRuntimeDeps, cmd: StartCommand, held: HeldSession): Promise<BootCredentials> {
  const env = cmd.environment;
  const credentials = deps.secrets.boot(env?.secretRefs ?? [], { ...held, environmentId: env?.environmentId });
  credentials.catch(() => undefined); // awaited in prepareSandbox, unless the create or the restore fails first
  return credentials;
}

/** Prepares the sandbox; answers the apps' env. Throws (a BootError when told) when it cannot. */
export async function prepareSandbox(p: SandboxPrep): Promise<Record<string, string>> {
  const { deps, cmd, held, sandbox } = p;
  const env = cmd.environment;
  if (cmd.restore) {
    await deps.checkpoints.restore(cmd.restore, cmd.restoreKey, sandbox.workspace, sandbox.user).catch(rethrowAs("restore failed"));
    await sandbox.adopt();
  }
  // The gateway relay and the egress proxy need nothing of the credentials: both listen while the answer is on its way.
  const reach = await sandbox.reach(deps.gatewayUrl);
  // Egress: setup, init and the apps reach the network through the session's proxy (last: nothing overrides it).
  const egress = await p.startEgress(reach.egressHost, reach.egressPort);
  await reach.allow([egress.port]);
  const { values: secrets, sessionToken } = await p.credentials;
  const base = baseEnv(deps.childPath, sandbox.insideWorkspace, held.sessionId, sandbox.image?.env);
  const appEnv = { ...base, ...secrets, ...tokenEnv(cmd, sessionToken, reach.gatewayUrl) };
  const proxyEnv = reach.noProxy.length > 0 ? { ...egress.env, NO_PROXY: reach.noProxy.join(","), no_proxy: reach.noProxy.join(",") } : egress.env;
  Object.assign(appEnv, proxyEnv);
  // The spec's repositories, cloned by git inside the sandbox (decision 0048); a cold resume restored them with the rest.
  const repos = cmd.restore === undefined ? (cmd.spec.repos ?? []) : [];
  const cloneRepositories = async () => {
    if (repos.length === 0) return;
    const done = await cloneRepos({ sandbox, repos, env: { ...base, ...proxyEnv }, secrets, signal: p.signal });
    deps.log.info({ ...p.logFields, cloned: done.cloned.length, skipped: done.skipped.length }, "repositories cloned");
  };
  if (env) {
    const built = await bootEnvironment({
      environment: env,
      workspaceId: held.workspaceId,
      sandbox,
      restored: cmd.restore !== undefined,
      setupEnv: { ...base, ...proxyEnv },
      initEnv: appEnv,
      checkpoints: deps.checkpoints,
      signal: p.signal,
      beforeInit: cloneRepositories,
    });
    if (built.snapshot) void p.emit({ type: "env_snapshot", ...built.snapshot }, `${built.snapshot.environmentId}-${built.snapshot.setupHash}`);
    if (built.snapshotError) deps.log.warn({ ...p.logFields, reason: built.snapshotError }, "environment snapshot not stored");
  } else await cloneRepositories();
  return appEnv;
}

function rethrowAs(prefix: string): (err: unknown) => never {
  return (err) => {
    throw new BootError(`${prefix}: ${err instanceof CheckpointError ? err.message : "unknown error"}`);
  };
}

export interface StartedEgress {
  port: number;
  /** Points apps at the proxy. */
  env: Record<string, string>;
}

/** Egress: a session's proxy (egressAllow), from boot until the session ends. */
export class SessionEgress {
  private proxy: EgressProxy | undefined;
  /** What this generation sent and received through its proxy (kept after the proxy stops, for the usage report). */
  bytes: () => number = () => 0;

  /** Starts the proxy for allow on host; answers its port and the env that points apps at it. */
  async start(allow: string[], host: string, port: number, deps: SessionRuntimeDeps, logFields: Record<string, unknown>, ending: () => boolean): Promise<StartedEgress> {
    const proxy = await startEgressProxy({
      host,
      port,
      allow,
      log: deps.log,
      refused: egressRefusals(deps.metrics.registry),
      logFields,
    });
    // Ended while the proxy was starting: nothing will stop it later.
    if (ending()) void proxy.close();
    else this.proxy = proxy;
    this.bytes = () => proxy.bytes();
    return { port: proxy.port, env: egressEnv(proxy.url) };
  }

  stop(): void {
    void this.proxy?.close();
    this.proxy = undefined;
  }
}

/** Saves the workspace as this placement's checkpoint for requestId; refuses the command when it fails. */
export async function saveCheckpoint(
  deps: SessionRuntimeDeps,
  held: HeldSession,
  workspace: string,
  requestId: string,
  user: SandboxUser | undefined,
  base?: readonly string[],
): Promise<SavedCheckpoint> {
  const name = checkpointObjectName(held.workspaceId, held.sessionId, held.placementGeneration, requestId);
  try {
    return await deps.checkpoints.save("checkpoints", name, workspace, user, base);
  } catch (err) {
    deps.metrics.checkpointFailures.inc();
    throw new CommandRefusedError(err instanceof CheckpointError ? err.message : "checkpoint failed", { cause: err });
  }
}
