import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { serveRpc, type BusMetrics } from "@paddock/bus";
import { ConflictError, SESSION_METRICS_RETENTION_MS, sessionMetricsRpc } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { UsageMeter } from "../sandbox/usage.ts";

interface Target {
  sessionId: string;
  workspaceId: string;
  placementGeneration: number;
}

export interface MetricsOpDeps {
  nc: NatsConnection;
  poolId: string;
  runnerId: string;
  /** The held session a request names, at its placement generation (conflict otherwise). */
  held: (t: Target) => { readonly meter: UsageMeter | undefined };
  translate: <T>(fn: () => Promise<T>) => Promise<T>;
  metrics: BusMetrics;
  log: Logger;
}

/** Answers a held session's metrics samples (`GET /v1/sessions/:id/metrics`), one taken now. Reading them is not activity. */
export function serveMetricsOp(deps: MetricsOpDeps): Subscription {
  const rpc = sessionMetricsRpc(deps.poolId, deps.runnerId);
  return serveRpc(
    deps.nc,
    rpc,
    (req) =>
      deps.translate(async () => {
        const meter = deps.held(req).meter;
        if (!meter) throw new ConflictError("the session has no sandbox on this runner");
        // One sample now: the last is fresh (the workspace walked again too).
        await meter.sample(true);
        return { sessionId: req.sessionId, placementGeneration: req.placementGeneration, sampleMs: meter.sampleMs, retentionMs: SESSION_METRICS_RETENTION_MS, samples: meter.samples() };
      }),
    { queue: `metrics-${deps.runnerId}`, metrics: deps.metrics, log: deps.log },
  );
}
