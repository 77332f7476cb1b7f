import { z } from "zod";
import { Api, Id, MAX_PAGE_LIMIT, NotFoundError, type Runner, type Scope } from "@paddock/contracts";
import { Action } from "../auth/auth.ts";
import { workspaceResource, type GatewayContext } from "../context.ts";
import { NoQuery, parseWith, queryObject, readOptionalJsonBody, route, sendJson, type Route } from "../http/http.ts";
import { EmptyBody } from "./lifecycle.ts";
import { QueryCursor, QueryLimit } from "./sessions.ts";

export const ListRunnersQuery = z.object({ limit: QueryLimit, cursor: QueryCursor }).strict();

/** The runner state each state-change route asks the scheduler for. */
const STATE_ROUTES = [
  ["drain", "draining"],
  ["cordon", "cordoned"],
  ["uncordon", "active"],
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
  const { config } = ctx.deps;

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
    route("GET", "/v1/runners", async ({ req, res, query }) => {
      const scope = await ctx.authenticate(req);
      const q = parseWith(ListRunnersQuery, queryObject(query), "query");
      await ctx.authorizer.authorize(scope, Action.listRunners, workspaceResource(scope));
      const page = await ctx.call(Api.listRunners, {
        scope,
        limit: q.limit,
        ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
      });
      sendJson(res, 200, { runners: page.runners, ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) });
    }),

    route("GET", "/v1/runners/:id", async ({ req, res, params, query }) => {
      const scope = await ctx.authenticate(req);
      parseWith(NoQuery, queryObject(query), "query");
      const runnerId = parseWith(Id, params.id, "runner id");
      await ctx.authorizer.authorize(scope, Action.getRunner, workspaceResource(scope));
      sendJson(res, 200, await findRunner(scope, runnerId));
    }),

    ...STATE_ROUTES.map(([verb, state]) =>
      route("POST", `/v1/runners/:id/${verb}`, async ({ req, res, params, query }) => {
        const scope = await ctx.authenticate(req);
        parseWith(NoQuery, queryObject(query), "query");
        const runnerId = parseWith(Id, params.id, "runner id");
        parseWith(EmptyBody, await readOptionalJsonBody(req, config.maxBodyBytes), "body");
        await ctx.authorizer.authorize(scope, Action.setRunnerState, workspaceResource(scope));
        const { runner } = await ctx.call(Api.setRunnerState, { scope, runnerId, state });
        sendJson(res, 200, runner);
      }),
    ),
  ];
}
