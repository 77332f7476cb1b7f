import { z } from "zod";
import { EpochMs, Generation, Id } from "./ids.ts";
import type { Rpc } from "./rpc.ts";
import { runnerOpSubject } from "./workspace.ts";

/**
 * Per-session metrics (issue 28 item 5): what the runner holding a session
 * samples of it every few seconds — CPU time, memory, workspace size and
 * egress bytes — kept for the last hour of its current placement
 * (`GET /v1/sessions/:id/metrics`). Counters (cpuSeconds, networkBytes)
 * are cumulative since the placement began; a resume starts them again.
 */

/** How long a placement's samples are kept (the runner's ring holds retention / interval of them). */
export const SESSION_METRICS_RETENTION_MS = 60 * 60 * 1000;

export const SessionMetricSample = z
  .object({
    at: EpochMs,
    /** CPU time of the session's processes since the placement began (its cgroup's where it has one). */
    cpuSeconds: z.number().nonnegative(),
    /** Resident memory of its processes at the sample. */
    memoryBytes: z.number().int().nonnegative(),
    /** Bytes of its workspace (sampled less often: the walk costs; the latest known). */
    diskBytes: z.number().int().nonnegative(),
    /** Bytes that passed its egress proxy since the placement began. */
    networkBytes: z.number().int().nonnegative(),
  })
  .strict();
export type SessionMetricSample = z.infer<typeof SessionMetricSample>;

/** `GET /v1/sessions/:id/metrics`: the samples oldest first (none for a session without a live sandbox). */
export const SessionMetrics = z
  .object({
    sessionId: Id,
    placementGeneration: Generation,
    sampleMs: z.number().int().positive(),
    retentionMs: z.number().int().positive(),
    samples: z.array(SessionMetricSample),
  })
  .strict();
export type SessionMetrics = z.infer<typeof SessionMetrics>;

export const SessionMetricsRequest = z.object({ sessionId: Id, workspaceId: Id, placementGeneration: Generation.min(1) }).strict();

/** The rpc of the runner holding a session: its samples, with one taken now (so the last is fresh). */
export function sessionMetricsRpc(poolId: string, runnerId: string) {
  return { subject: runnerOpSubject(poolId, runnerId, "metrics"), request: SessionMetricsRequest, result: SessionMetrics } satisfies Rpc<z.ZodType, z.ZodType>;
}
