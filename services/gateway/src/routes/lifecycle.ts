import type { ServerResponse } from "node:http";
import { Api, ConflictError, DEFAULT_WAIT_MS, HttpApi, NotFoundError, snapshotOutcome, SnapshotStatus, type Session, type SessionState } from "@paddock/contracts";
import { Action, type Principal } from "../auth/auth.ts";
import { resolveApp, sessionResource, type GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";
import { waitForState, watchSession } from "./wait-state.ts";

/** 202: the runner is still taking the snapshot; Location is where to wait for it. */
function snapshotPending(res: ServerResponse, sessionId: string, requestId: string) {
  res.setHeader("location", `/v1/sessions/${encodeURIComponent(sessionId)}/snapshots/${encodeURIComponent(requestId)}`);
  return { status: 202 as const, body: { sessionId, requestId, status: "pending" as const } };
}

/**
 * The session lifecycle routes: suspend, resume, snapshot, recycle and app
 * restart. Each: authenticate → validate (query, ids, body) → fetch the
 * session → authorize on the current membership (creator or admin) → act.
 */
export function lifecycleRoutes(ctx: GatewayContext): Route[] {
  /** The common prefix of every lifecycle route; answers the fetched, authorized session. */
  const prepare = async (input: { caller: Principal; params: { id: string }; body: () => Promise<unknown> }, action: Action): Promise<Session> => {
    const { scope } = input.caller;
    await input.body();
    const session = await ctx.getSession(scope, input.params.id);
    await ctx.authorizer.authorize(scope, action, sessionResource(session));
    return session;
  };

  /** The answer of a call asked to `wait` (waitForState); the record as it is otherwise. */
  const waited = (input: { caller: Principal; query: { wait?: SessionState | undefined; timeoutMs?: number | undefined }; res: ServerResponse }, session: Session) =>
    waitForState(ctx, input.caller.scope, session, { state: input.query.wait, timeoutMs: input.query.timeoutMs }, input.res);

  return [
    ctx.serve(HttpApi.suspendSession, async (input) => {
      const session = await prepare(input, Action.suspendSession);
      const { warm } = await input.body();
      const r = await ctx.call(Api.suspendSession, { scope: input.caller.scope, sessionId: session.id, warm });
      return { status: 200, body: await waited(input, r.session) };
    }),

    ctx.serve(HttpApi.resumeSession, async (input) => {
      const session = await prepare(input, Action.resumeSession);
      const r = await ctx.call(Api.resumeSession, { scope: input.caller.scope, sessionId: session.id });
      return { status: 200, body: await waited(input, r.session) };
    }),

    ctx.serve(HttpApi.snapshotSession, async (input) => {
      const session = await prepare(input, Action.snapshotSession);
      const r = await ctx.call(Api.snapshotSession, { scope: input.caller.scope, sessionId: session.id });
      if (r.checkpoint) return { status: 200, body: r.checkpoint };
      return snapshotPending(input.res, session.id, r.requestId);
    }),

    // Waits for a snapshot a 202 named, on the record's committed facts (no polling). A read: whoever may get the session.
    ctx.serve(HttpApi.getSnapshot, async ({ caller: { scope }, params, query, res }) => {
      const session = await ctx.getSession(scope, params.id);
      await ctx.authorizer.authorize(scope, Action.getSession, sessionResource(session));
      const outcome = await watchSession(ctx, scope, session, (current, over) => {
        const o = snapshotOutcome(current, params.requestId);
        return o.status !== SnapshotStatus.pending || over ? o : undefined;
      }, query.timeoutMs ?? DEFAULT_WAIT_MS, res);
      switch (outcome.status) {
        case SnapshotStatus.taken:
          return { status: 200, body: outcome.checkpoint };
        case SnapshotStatus.pending:
          return snapshotPending(res, session.id, params.requestId);
        case SnapshotStatus.refused:
          throw new ConflictError(`the runner refused: ${outcome.reason}`);
        case SnapshotStatus.ended:
          throw new ConflictError(`the session ended (${outcome.state}) before the snapshot`);
        case SnapshotStatus.unknown:
          throw new NotFoundError("snapshot request");
      }
    }),

    ctx.serve(HttpApi.recycleSession, async (input) => {
      const session = await prepare(input, Action.recycleSession);
      const r = await ctx.call(Api.recycleSession, { scope: input.caller.scope, sessionId: session.id });
      // A wait is for the replacement's state.
      const { waited: outcome, ...replacement } = await waited(input, r.session);
      return { status: 201, body: { released: r.released, session: replacement, ...(outcome ? { waited: outcome } : {}) } };
    }),

    ctx.serve(HttpApi.restartApp, async (input) => {
      const session = await prepare(input, Action.restartApp);
      const { app } = input.params;
      // After authorization: a caller who may not act learns nothing about the apps.
      resolveApp(session, app);
      const r = await ctx.call(Api.restartApp, { scope: input.caller.scope, sessionId: session.id, app });
      return { status: 200, body: await waited(input, r.session) };
    }),
  ];
}
