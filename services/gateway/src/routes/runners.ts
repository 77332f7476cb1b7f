import { Api, HttpApi, MAX_PAGE_LIMIT, NotFoundError, RunnerState, type Runner, type Scope } from "@paddock/contracts";
import { Action } from "../auth/auth.ts";
import { workspaceResource, type GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";

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
export function runnerRoutes(ctx: GatewayContext): Route[] {
  /** Walks listRunners pages until the runner is found; there is no get rpc. */
  const findRunner = async (scope: Scope, runnerId: string): Promise<Runner> => {
    let cursor: string | undefined;
    for (let page = 0; page < MAX_RUNNER_PAGES; page++) {
      const r = await ctx.call(Api.listRunners, { scope, limit: MAX_PAGE_LIMIT, ...(cursor !== undefined ? { cursor } : {}) });
      const found = r.runners.find((x) => x.id === runnerId);
      if (found) return found;
      if (!r.nextCursor || r.nextCursor === cursor) break;
      cursor = r.nextCursor;
    }
    throw new NotFoundError("runner");
  };

  return [
    ctx.serve(HttpApi.listRunners, async ({ caller: { scope }, query: q }) => {
      await ctx.authorizer.authorize(scope, Action.listRunners, workspaceResource(scope));
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
