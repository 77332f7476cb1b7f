import { canReach, DEFAULT_WAIT_MS, Subjects, WaitOutcome, type Scope, type Session, type SessionState, type Waited } from "@paddock/contracts";
import type { GatewayContext } from "../context.ts";

/** A call's wait: the state it waits for, and for how long (DEFAULT_WAIT_MS when unsaid). */
export interface WaitAsk {
  state: SessionState | undefined;
  timeoutMs: number | undefined;
}

/** What tells a wait its client went away: a response (or a socket) that closes. */
export interface Closer {
  once(event: "close", listener: () => void): unknown;
  off(event: "close", listener: () => void): unknown;
}

/**
 * Answers `session` as it is once it is in `ask.state`, can no longer come to
 * it, or `ask.timeoutMs` passed (issue 24 item 7), with `waited` saying
 * which; at once, unchanged, without a state. No polling: the session's AUDIT
 * subject (every committed fact of a session is an audit event on it) is
 * subscribed before the record is read again, and each event reads it anew,
 * so no commit between the read and the subscription goes unseen. A client
 * that goes away ends the wait (its answer is not sent).
 */
export async function waitForState(ctx: GatewayContext, scope: Scope, session: Session, ask: WaitAsk, res?: Closer): Promise<Session & { waited?: Waited }> {
  const target = ask.state;
  if (target === undefined) return session;
  return watchSession(
    ctx,
    scope,
    session,
    (current, over) => {
      if (current.state === target) return { ...current, waited: { state: target, outcome: WaitOutcome.reached } };
      if (!canReach(current.state, target)) return { ...current, waited: { state: target, outcome: WaitOutcome.unreachable } };
      return over ? { ...current, waited: { state: target, outcome: WaitOutcome.timeout } } : undefined;
    },
    ask.timeoutMs ?? DEFAULT_WAIT_MS,
    res,
  );
}

/**
 * The record's answer to `decide`, asked of the record as it is now and again
 * after each of its committed facts, until it answers; once timeoutMs passed
 * or the client went away, it is asked with `over` and must answer then.
 */
export async function watchSession<T>(
  ctx: GatewayContext,
  scope: Scope,
  session: Session,
  decide: (current: Session, over: boolean) => T | undefined,
  timeoutMs: number,
  res?: Closer,
): Promise<T> {
  const { nc } = ctx.deps;
  let wake: () => void = () => undefined;
  let events = 0;
  const sub = nc.subscribe(Subjects.audit(session.workspaceId, "session", session.id), {
    callback: () => {
      events += 1;
      wake();
    },
  });
  let over = false;
  const onClose = () => {
    over = true;
    wake();
  };
  // The response's close before it was sent: the client went away (a request's own close only says its body was read).
  res?.once("close", onClose);
  const cancelTimer = ctx.after(timeoutMs, () => {
    over = true;
    wake();
  });
  try {
    await nc.flush();
    // Events counted before a read are covered by it; one that came during the read asks for another.
    let readAfter = events;
    let current = await ctx.getSession(scope, session.id);
    for (;;) {
      const answer = decide(current, over);
      if (answer !== undefined) return answer;
      await new Promise<void>((resolve) => {
        wake = resolve;
        if (events !== readAfter || over) resolve();
      });
      if (events !== readAfter) {
        readAfter = events;
        current = await ctx.getSession(scope, session.id);
      }
    }
  } finally {
    cancelTimer();
    res?.off("close", onClose);
    sub.unsubscribe();
  }
}
