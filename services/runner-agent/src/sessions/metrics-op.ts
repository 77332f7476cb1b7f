import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { serveRpc, type BusMetrics } from "@paddock/bus";
import { ConflictError, SESSION_METRICS_RETENTION_MS, sessionMetricsRpc, type SessionMetricSample } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";

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
  held: (t: Target) => { metricSamples(): Promise<{ sampleMs: number; samples: SessionMetricSample[] } | undefined> };
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
        const got = await deps.held(req).metricSamples();
        if (!got) throw new ConflictError("the session has no sandbox on this runner");
        return { sessionId: req.sessionId, placementGeneration: req.placementGeneration, sampleMs: got.sampleMs, retentionMs: SESSION_METRICS_RETENTION_MS, samples: got.samples };
      }),
    { queue: `metrics-${deps.runnerId}`, metrics: deps.metrics, log: deps.log },
  );
}
