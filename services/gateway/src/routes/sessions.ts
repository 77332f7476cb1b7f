import { z } from "zod";
import { Api, CreateSessionBody, DEFAULT_PAGE_LIMIT, Id, MAX_PAGE_LIMIT } from "@paddock/contracts";
import { Action } from "../auth/auth.ts";
import { sessionResource, workspaceResource, type GatewayContext } from "../context.ts";
import { NoQuery, parseWith, queryObject, readJsonBody, route, sendJson, type Route } from "../http/http.ts";

/**
 * A page limit in a query string: an integer ≥ 1, clamped to MAX_PAGE_LIMIT
 * (a larger one is not an error), DEFAULT_PAGE_LIMIT when absent.
 */
export const QueryLimit = z
  .string()
  .regex(/^\d{1,15}$/, "must be an integer")
  .transform(Number)
  .pipe(z.number().int().min(1))
  .transform((n) => Math.min(n, MAX_PAGE_LIMIT))
  .default(DEFAULT_PAGE_LIMIT);

export const QueryCursor = z.string().min(1).max(256).optional();

const QueryBool = z
  .enum(["true", "false"])
  .transform((v) => v === "true")
  .default(false);

export const ListSessionsQuery = z
  .object({ limit: QueryLimit, cursor: QueryCursor, includeTerminal: QueryBool, parentId: Id.optional() })
  .strict();

export function sessionRoutes(ctx: GatewayContext): Route[] {
  const { config } = ctx.deps;
  return [
    route("POST", "/v1/sessions", async ({ req, res, query }) => {
      const { scope, tokenHash } = await ctx.principal(req);
      parseWith(NoQuery, queryObject(query), "query");
      await ctx.authorizer.authorize(scope, Action.createSession, workspaceResource(scope));
      const body = parseWith(CreateSessionBody, await readJsonBody(req, config.maxBodyBytes), "body");
      // Counted once the create is valid and allowed: a refused request spends nothing.
      ctx.creates.check(tokenHash, "session creates");
      const { session, replayed } = await ctx.call(Api.createSession, { scope, body });
      sendJson(res, replayed ? 200 : 201, session);
    }),

    route("GET", "/v1/sessions", async ({ req, res, query }) => {
      const scope = await ctx.authenticate(req);
      const q = parseWith(ListSessionsQuery, queryObject(query), "query");
      await ctx.authorizer.authorize(scope, Action.listSessions, workspaceResource(scope));
      const page = await ctx.call(Api.listSessions, {
        scope,
        limit: q.limit,
        includeTerminal: q.includeTerminal,
        ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
        ...(q.parentId !== undefined ? { parentId: q.parentId } : {}),
      });
      // Defence in depth: the scheduler scopes by key; never show another workspace's record.
      const sessions = page.sessions.filter((s) => s.workspaceId === scope.workspaceId);
      sendJson(res, 200, { sessions, ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) });
    }),

    route("GET", "/v1/sessions/:id", async ({ req, res, params, query }) => {
      const scope = await ctx.authenticate(req);
      parseWith(NoQuery, queryObject(query), "query");
      const session = await ctx.getSession(scope, params.id);
      await ctx.authorizer.authorize(scope, Action.getSession, sessionResource(session));
      sendJson(res, 200, session);
    }),

    route("DELETE", "/v1/sessions/:id", async ({ req, res, params, query }) => {
      const scope = await ctx.authenticate(req);
      parseWith(NoQuery, queryObject(query), "query");
      const current = await ctx.getSession(scope, params.id);
      await ctx.authorizer.authorize(scope, Action.deleteSession, sessionResource(current));
      const { session } = await ctx.call(Api.deleteSession, { scope, sessionId: current.id });
      sendJson(res, 200, session);
    }),
  ];
}
