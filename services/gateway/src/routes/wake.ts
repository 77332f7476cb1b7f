import { Api, UnavailableError, type Scope, type Session } from "@paddock/contracts";
import type { GatewayContext } from "../context.ts";
import { waitForState, type Closer } from "./wait-state.ts";

/** The longest a call to a suspended session waits for it to run again (docs/ports.md, Wake on use). */
export const WAKE_WAIT_MS = 60_000;

/**
 * Wake on use (issue 25 item 4): a suspended session is resumed for the call
 * that needs it running (warm: in place; cold: on any runner of its pool) and
 * the call goes on once it runs, or fails `unavailable` after WAKE_WAIT_MS.
 * The caller already authorized the call itself; waking is part of it.
 */
export async function wakeForUse(ctx: GatewayContext, scope: Scope, session: Session, closer?: Closer): Promise<Session> {
  if (session.state !== "suspended_warm" && session.state !== "suspended_cold") return session;
  await ctx.call(Api.resumeSession, { scope, sessionId: session.id });
  const { waited: _waited, ...woken } = await waitForState(ctx, scope, session, { state: "running", timeoutMs: WAKE_WAIT_MS }, closer);
  if (woken.state !== "running") throw new UnavailableError(`the session did not resume within ${WAKE_WAIT_MS / 1_000} s (it is ${woken.state}); retry`);
  return woken;
}
