import { Api, ConflictError, UnavailableError, type Scope, type Session } from "@paddock/contracts";
import type { GatewayContext } from "../context.ts";
import { waitForState, type Closer } from "./wait-state.ts";

/** The longest a call to a suspended session waits for it to run again (docs/ports.md, Wake on use). */
export const WAKE_WAIT_MS = 60_000;
/** Resumes tried before giving up (each after a suspend that was under way settled). */
const WAKE_ATTEMPTS = 3;

/**
 * Wake on use (issue 25 item 4): a suspended session is resumed for the call
 * that needs it running (warm: in place; cold: on any runner of its pool) and
 * the call goes on once it runs, or fails `unavailable` after WAKE_WAIT_MS.
 * A suspend under way (the idle policy's, say) is let finish and then
 * undone. The caller already authorized the call itself; waking is part of it.
 */
export async function wakeForUse(ctx: GatewayContext, scope: Scope, session: Session, closer?: Closer): Promise<Session> {
  let current = session;
  for (let attempt = 0; attempt < WAKE_ATTEMPTS; attempt++) {
    if (current.state === "running" && current.pending === undefined) return current;
    if (current.state !== "suspended_warm" && current.state !== "suspended_cold" && current.state !== "running") return current;
    const op = current.pending?.op;
    if (op === "suspend_warm" || op === "suspend_cold") {
      const { waited: _w, ...settled } = await waitForState(ctx, scope, current, { state: op === "suspend_warm" ? "suspended_warm" : "suspended_cold", timeoutMs: WAKE_WAIT_MS }, closer);
      current = settled;
      continue;
    }
    try {
      await ctx.call(Api.resumeSession, { scope, sessionId: current.id });
    } catch (err) {
      // Busy (a suspend began meanwhile): read it again and go on from there.
      if (!(err instanceof ConflictError)) throw err;
      current = await ctx.getSession(scope, current.id);
      continue;
    }
    const { waited: _w, ...woken } = await waitForState(ctx, scope, current, { state: "running", timeoutMs: WAKE_WAIT_MS }, closer);
    current = woken;
    if (current.state === "running") return current;
  }
  throw new UnavailableError(`the session did not resume (it is ${current.state}); retry`);
}

/**
 * A call that needs the session's sandbox (an exec, a workspace call), made
 * while the session's sandbox is being made (`creating`: placed, its output
 * may already show, its running fact not yet committed), waits until it
 * runs instead of being refused, as a call to a suspended session waits for
 * its resume. A queued session is not waited for (it has no runner yet and
 * may wait long for one: the caller refuses it at once). A session that ends
 * instead is answered as it is (the caller refuses it); one still creating
 * after WAKE_WAIT_MS is `unavailable`.
 */
export async function startedForUse(ctx: GatewayContext, scope: Scope, session: Session, closer?: Closer): Promise<Session> {
  if (session.state !== "creating") return session;
  const { waited: _w, ...settled } = await waitForState(ctx, scope, session, { state: "running", timeoutMs: WAKE_WAIT_MS }, closer);
  if (settled.state === "creating") throw new UnavailableError("the session did not start in time (it is creating); retry");
  return settled;
}
