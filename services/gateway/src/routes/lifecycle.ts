import { z } from "zod";
import { Api, Id, type Scope, type Session } from "@paddock/contracts";
import { Action } from "../auth/auth.ts";
import { resolveApp, sessionResource, type GatewayContext } from "../context.ts";
import { NoQuery, parseWith, queryObject, readJsonBody, readOptionalJsonBody, route, sendJson, type Route, type RouteContext } from "../http/http.ts";

/** Body of POST /v1/sessions/:id/suspend: `warm` is required, nothing else is allowed. */
export const SuspendBody = z.object({ warm: z.boolean() }).strict();

/** Body of the lifecycle POSTs that take no fields: empty, or `{}`. */
export const EmptyBody = z.object({}).strict();

/**
 * The session lifecycle routes: suspend, resume, snapshot, recycle and app
 * restart. Each: authenticate → validate (query, body, ids) → fetch the
 * session → authorize on the current membership (creator or admin) → act.
 */
export function lifecycleRoutes(ctx: GatewayContext): Route[] {
  const { config } = ctx.deps;

  /** The common prefix of every lifecycle route; answers the fetched, authorized session. */
  const prepare = async <S extends z.ZodType>(
    { req, params, query }: RouteContext,
    action: Action,
    bodySchema: S,
    required: boolean,
  ): Promise<{ scope: Scope; session: Session; body: z.infer<S> }> => {
    const scope = await ctx.authenticate(req);
    parseWith(NoQuery, queryObject(query), "query");
    const sessionId = parseWith(Id, params.id, "session id");
    const raw = required ? await readJsonBody(req, config.maxBodyBytes) : await readOptionalJsonBody(req, config.maxBodyBytes);
    const body = parseWith(bodySchema, raw, "body");
    const session = await ctx.getSession(scope, sessionId);
    await ctx.authorizer.authorize(scope, action, sessionResource(session));
    return { scope, session, body };
  };

  return [
    route("POST", "/v1/sessions/:id/suspend", async (rc) => {
      const { scope, session, body } = await prepare(rc, Action.suspendSession, SuspendBody, true);
      const r = await ctx.call(Api.suspendSession, { scope, sessionId: session.id, warm: body.warm });
      sendJson(rc.res, 200, r.session);
    }),

    route("POST", "/v1/sessions/:id/resume", async (rc) => {
      const { scope, session } = await prepare(rc, Action.resumeSession, EmptyBody, false);
      const r = await ctx.call(Api.resumeSession, { scope, sessionId: session.id });
      sendJson(rc.res, 200, r.session);
    }),

    route("POST", "/v1/sessions/:id/snapshot", async (rc) => {
      const { scope, session } = await prepare(rc, Action.snapshotSession, EmptyBody, false);
      const r = await ctx.call(Api.snapshotSession, { scope, sessionId: session.id });
      sendJson(rc.res, 200, r.checkpoint);
    }),

    route("POST", "/v1/sessions/:id/recycle", async (rc) => {
      const { scope, session } = await prepare(rc, Action.recycleSession, EmptyBody, false);
      const r = await ctx.call(Api.recycleSession, { scope, sessionId: session.id });
      sendJson(rc.res, 201, { released: r.released, session: r.session });
    }),

    route("POST", "/v1/sessions/:id/apps/:app/restart", async (rc) => {
      const app = parseWith(Id, rc.params.app, "app");
      const { scope, session } = await prepare(rc, Action.restartApp, EmptyBody, false);
      // After authorization: a caller who may not act learns nothing about the apps.
      resolveApp(session, app);
      const r = await ctx.call(Api.restartApp, { scope, sessionId: session.id, app });
      sendJson(rc.res, 200, r.session);
    }),
  ];
}
