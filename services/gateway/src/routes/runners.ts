import type { ServerResponse } from "node:http";
import type { KvWatchEntry } from "@nats-io/kv";
import { decodeJson } from "@paddock/bus";
import { Api, Buckets, HttpApi, MAX_PAGE_LIMIT, NotFoundError, Runner, RunnerState, runnerKey, type RunnerFeedLine, type Scope } from "@paddock/contracts";
import { Action, lazyKv, type Principal } from "../auth/auth.ts";
import type { Reauthorize, StreamGuard } from "../auth/revocation.ts";
import { workspaceResource, type GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";
import { serveRecordFeed } from "../auth/record-feed.ts";

/** The runner state each state-change route asks the scheduler for. */
const STATE_ROUTES = [
  [HttpApi.drainRunner, RunnerState.draining],
  [HttpApi.cordonRunner, RunnerState.cordoned],
  [HttpApi.uncordonRunner, RunnerState.active],
] as const;

/** A bound on the pages GET /v1/runners/:id walks (500 runners each): a looping cursor cannot hold a request forever. */
export const MAX_RUNNER_PAGES = 200;

/**
 * Runner routes. Runners are fleet-wide (not of a workspace), so there is no
 * not_found-by-workspace: members list and get; only a workspace admin changes
 * a runner's state (drain, cordon, uncordon). Order: authenticate → validate →
 * authorize on the current membership → act; an unknown runner is the
 * scheduler's not_found, answered only to an admin.
 */
export function runnerRoutes(ctx: GatewayContext, guard: StreamGuard): Route[] {
  /** Walks listRunners pages until `found` says stop; there is no get rpc. */
  const walkRunners = async (scope: Scope, found: (r: Runner) => boolean): Promise<void> => {
    let cursor: string | undefined;
    for (let page = 0; page < MAX_RUNNER_PAGES; page++) {
      const r = await ctx.call(Api.listRunners, { scope, limit: MAX_PAGE_LIMIT, ...(cursor !== undefined ? { cursor } : {}) });
      if (r.runners.some(found)) return;
      if (!r.nextCursor || r.nextCursor === cursor) break;
      cursor = r.nextCursor;
    }
  };
  const findRunner = async (scope: Scope, runnerId: string): Promise<Runner> => {
    let runner: Runner | undefined;
    await walkRunners(scope, (r) => {
      if (r.id === runnerId) runner = r;
      return runner !== undefined;
    });
    if (!runner) throw new NotFoundError("runner");
    return runner;
  };
  const runnersKv = lazyKv(ctx.deps.nc, Buckets.runners);
  const leasesKv = lazyKv(ctx.deps.nc, Buckets.runnerLeases);

  /**
   * GET /v1/runners?follow=true: the scheduler's list (lastSeenAt from the
   * leases), then each record change from KV `runners` and each lease renewal
   * from KV `runner-leases` (a `seen` line: renewals are not record writes).
   */
  const followRunners = async (principal: Principal, reauthorize: Reauthorize, res: ServerResponse): Promise<void> => {
    const seen = new Map<string, number>();
    const withSeen = (r: Runner): Runner => ({ ...r, lastSeenAt: Math.max(r.lastSeenAt, seen.get(runnerKey(r.poolId, r.id)) ?? 0) });
    const runnerLine = (e: KvWatchEntry): RunnerFeedLine | undefined => {
      if (e.operation !== "PUT") return removedLine(e.key);
      const decoded = decodeJson(Runner, e.value);
      return decoded.ok ? { runner: withSeen(decoded.value) } : undefined;
    };
    const leaseLine = (e: KvWatchEntry): RunnerFeedLine | undefined => {
      const [poolId, id] = e.key.split(".");
      if (e.operation !== "PUT" || !poolId || !id) return undefined;
      const at = e.created.getTime();
      seen.set(e.key, at);
      return { seen: { poolId, id, at } };
    };
    await serveRecordFeed<RunnerFeedLine>({
      res,
      guard,
      principal,
      reauthorize,
      log: ctx.deps.log,
      sources: [
        { kv: await runnersKv(), lineOf: runnerLine },
        { kv: await leasesKv(), lineOf: leaseLine },
      ],
      snapshot: async () => {
        const lines: RunnerFeedLine[] = [];
        await walkRunners(principal.scope, (r) => (lines.push({ runner: r }), false));
        return lines;
      },
      synced: { synced: true },
    });
  };

  return [
    ctx.serve(HttpApi.listRunners, async ({ caller: principal, query: q, res }) => {
      const { scope } = principal;
      const reauthorize: Reauthorize = (s) => ctx.authorizer.authorize(s, Action.listRunners, workspaceResource(s));
      await reauthorize(scope);
      if (q.follow) return followRunners(principal, reauthorize, res);
      const page = await ctx.call(Api.listRunners, {
        scope,
        limit: q.limit,
        ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
      });
      return { status: 200, body: { runners: page.runners, ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) } };
    }),

    ctx.serve(HttpApi.getRunner, async ({ caller: { scope }, params }) => {
      await ctx.authorizer.authorize(scope, Action.getRunner, workspaceResource(scope));
      return { status: 200, body: await findRunner(scope, params.id) };
    }),

    ...STATE_ROUTES.map(([contract, state]) =>
      ctx.serve(contract, async ({ caller: { scope }, params, body }) => {
        await body();
        await ctx.authorizer.authorize(scope, Action.setRunnerState, workspaceResource(scope));
        const { runner } = await ctx.call(Api.setRunnerState, { scope, runnerId: params.id, state });
        return { status: 200, body: runner };
      }),
    ),
  ];
}

function removedLine(key: string): RunnerFeedLine | undefined {
  const [poolId, id] = key.split(".");
  return poolId && id ? { removed: { poolId, id } } : undefined;
}
