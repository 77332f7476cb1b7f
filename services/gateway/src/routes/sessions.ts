import { Api, HttpApi } from "@paddock/contracts";
import { Action } from "../auth/auth.ts";
import { sessionResource, workspaceResource, type GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";
import { waitForState } from "./wait-state.ts";

export function sessionRoutes(ctx: GatewayContext): Route[] {
  return [
    ctx.serve(HttpApi.createSession, async ({ caller: { scope, tokenHash }, body, query, res }) => {
      await ctx.authorizer.authorize(scope, Action.createSession, workspaceResource(scope));
      const create = await body();
      // Counted once the create is valid and allowed: a refused request spends nothing.
      ctx.creates.check(tokenHash, "session creates");
      const { session, replayed } = await ctx.call(Api.createSession, { scope, body: create });
      return { status: replayed ? 200 : 201, body: await waitForState(ctx, scope, session, { state: query.wait, timeoutMs: query.timeoutMs }, res) };
    }),

    ctx.serve(HttpApi.listSessions, async ({ caller: { scope }, query: q }) => {
      await ctx.authorizer.authorize(scope, Action.listSessions, workspaceResource(scope));
      const page = await ctx.call(Api.listSessions, {
        scope,
        limit: q.limit,
        includeTerminal: q.includeTerminal,
        ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
        ...(q.parentId !== undefined ? { parentId: q.parentId } : {}),
        ...(q.creatorId !== undefined ? { creatorId: q.creatorId } : {}),
      });
      // Defence in depth: the scheduler scopes by key, and lists a session's token only what it created; never show more.
      const sessions = page.sessions.filter(
        (s) => s.workspaceId === scope.workspaceId && (scope.sessionId === undefined || (s.creatorId === scope.actor.id && s.id !== scope.sessionId)),
      );
      return { status: 200, body: { sessions, ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) } };
    }),

    ctx.serveSession(HttpApi.getSession, async ({ caller: { scope }, params, query, req, res }) => {
      const session = await ctx.getSession(scope, params.id, req);
      await ctx.authorizer.authorize(scope, Action.getSession, sessionResource(session));
      return { status: 200, body: await waitForState(ctx, scope, session, { state: query.waitFor, timeoutMs: query.timeoutMs }, res) };
    }),

    ctx.serve(HttpApi.deleteSession, async ({ caller: { scope }, params, query, res }) => {
      const current = await ctx.getSession(scope, params.id);
      await ctx.authorizer.authorize(scope, Action.deleteSession, sessionResource(current));
      const { session } = await ctx.call(Api.deleteSession, { scope, sessionId: current.id });
      return { status: 200, body: await waitForState(ctx, scope, session, { state: query.wait, timeoutMs: query.timeoutMs }, res) };
    }),
  ];
}
