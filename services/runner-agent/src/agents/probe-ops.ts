import type { Subscription, NatsConnection } from "@nats-io/transport-node";
import { serveRpc, type BusMetrics } from "@paddock/bus";
import { agentProbeRpcs, ConflictError, type HeldSession } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { findProcesses, resolveAncestor, stillAlive, type ProcessScope } from "./process-probe.ts";

/**
 * A held session as the agent probes reach it (a SessionRuntime is one):
 * declared here so that agents/ never imports sessions/.
 */
export interface HeldProcesses {
  readonly held: HeldSession;
  /** Whose processes are the session's now; undefined while it has no sandbox. */
  processScope(): ProcessScope | undefined;
}

interface Target {
  sessionId: string;
  workspaceId: string;
  placementGeneration: number;
}

export interface ProbeOpsDeps {
  nc: NatsConnection;
  poolId: string;
  runnerId: string;
  /** The held session a request names, at its placement generation (conflict otherwise; unavailable while fenced). */
  held: (t: Target) => HeldProcesses;
  translate: <T>(fn: () => Promise<T>) => Promise<T>;
  /** Where /proc is (tests point it elsewhere only to prove a walk's bounds). */
  procRoot?: string;
  metrics: BusMetrics;
  log: Logger;
}

/**
 * Serves the gateway's questions about a held session's processes: which
 * process a claimed pid is, whether declared processes are still the ones
 * that declared, and which declared process owns another. Only the session's
 * own processes are ever looked at or answered about; the answers carry host
 * pids, which go to the control plane only (the gateway never answers them).
 */
export function serveProbeOps(deps: ProbeOpsDeps): Subscription[] {
  const rpcs = agentProbeRpcs(deps.poolId, deps.runnerId);
  const opts = { queue: `probe-${deps.runnerId}`, metrics: deps.metrics, log: deps.log };
  const scopeOf = (t: Target): ProcessScope => {
    const scope = deps.held(t).processScope();
    if (!scope) throw new ConflictError("session has no sandbox on this runner");
    return scope;
  };
  return [
    serveRpc(
      deps.nc,
      rpcs.find,
      (req) =>
        deps.translate(async () => {
          const found = await findProcesses(scopeOf(req), req.pid, req.pidNamespace, deps.procRoot);
          return { matches: found.length, ...(found.length === 1 ? { seen: found[0] } : {}) };
        }),
      opts,
    ),
    serveRpc(
      deps.nc,
      rpcs.check,
      (req) =>
        deps.translate(async () => {
          const scope = scopeOf(req);
          return { alive: await Promise.all(req.processes.map((p) => stillAlive(scope, p, deps.procRoot))) };
        }),
      opts,
    ),
    serveRpc(
      deps.nc,
      rpcs.resolve,
      (req) =>
        deps.translate(async () => {
          const scope = scopeOf(req);
          const found = await findProcesses(scope, req.pid, req.pidNamespace, deps.procRoot);
          const start = found.length === 1 ? found[0] : undefined;
          const index = start ? await resolveAncestor(scope, start, req.declared, deps.procRoot) : undefined;
          return { matches: found.length, ...(index !== undefined ? { index } : {}) };
        }),
      opts,
    ),
  ];
}
