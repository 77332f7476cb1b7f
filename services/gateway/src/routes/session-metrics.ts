import { callRpc } from "@paddock/bus";
import { HttpApi, SESSION_METRICS_RETENTION_MS, sessionMetricsRpc } from "@paddock/contracts";
import { Action } from "../auth/auth.ts";
import { sessionResource, type GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";

/** A sample interval reported for a session without samples (the runners' default). */
const DEFAULT_SAMPLE_MS = 5_000;

/**
 * GET /v1/sessions/:id/metrics: the samples the runner holding the session
 * keeps (sessions/metrics-op.ts on the runner), read by any member. A
 * session without a live sandbox (queued, cold-suspended, ended) has none;
 * a read never wakes one.
 */
export function sessionMetricsRoutes(ctx: GatewayContext): Route[] {
  return [
    ctx.serve(HttpApi.getSessionMetrics, async ({ caller: { scope }, params }) => {
      const session = await ctx.getSession(scope, params.id);
      await ctx.authorizer.authorize(scope, Action.getSession, sessionResource(session));
      const live = (session.state === "running" || session.state === "suspended_warm") && session.poolId !== undefined && session.runnerId !== undefined;
      if (!live || session.poolId === undefined || session.runnerId === undefined) {
        return { status: 200, body: { sessionId: session.id, placementGeneration: session.placementGeneration, sampleMs: DEFAULT_SAMPLE_MS, retentionMs: SESSION_METRICS_RETENTION_MS, samples: [] } };
      }
      const target = { sessionId: session.id, workspaceId: session.workspaceId, placementGeneration: session.placementGeneration };
      const metrics = await callRpc(ctx.deps.nc, sessionMetricsRpc(session.poolId, session.runnerId), target, { timeoutMs: ctx.deps.config.rpcTimeoutMs });
      return { status: 200, body: metrics };
    }),
  ];
}
