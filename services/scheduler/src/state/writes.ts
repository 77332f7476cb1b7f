// The scheduler's record writes: the transition/fact builders and the CAS that
// applies a revision to the local view. Kept apart from context.ts, which
// holds the shared interfaces and imports no module that writes, so that
// every writer can import both without an import cycle.
import { canTransition, ConflictError, isTerminal, type AuditAction, type Runner, type Session, type SessionState } from "@paddock/contracts";
import type { SchedulerContext } from "../context.ts";
import type { Versioned } from "./store.ts";

/** The actor id recorded for what the scheduler does on its own (timeouts, reconciliation). */
export const SCHEDULER_ACTOR = "scheduler";

/**
 * Builds the next revision of a session for one transition. Every write is a
 * fact with a fresh event id (the record is the audit outbox). An illegal
 * transition is a typed conflict and is never applied.
 */
export function transition(
  ctx: Pick<SchedulerContext, "now" | "newId">,
  s: Session,
  to: SessionState,
  action: AuditAction,
  actorId: string,
  patch: Partial<Session> = {},
): Session {
  if (!canTransition(s.state, to)) throw new ConflictError(`session ${s.id} cannot go from ${s.state} to ${to}`);
  const next = withFact(ctx, { ...s, ...patch, state: to }, action, actorId);
  // Nothing is pending on a session that has ended: its runner will not answer.
  if (isTerminal(to)) delete next.pending;
  return next;
}

/** A new revision that commits `action` without changing state (e.g. a controller attach). */
export function withFact(
  ctx: Pick<SchedulerContext, "now" | "newId">,
  s: Session,
  action: AuditAction,
  actorId: string,
): Session {
  const at = ctx.now();
  return { ...s, updatedAt: at, lastFact: { eventId: ctx.newId("evt"), action, actorId, at } };
}

/**
 * Compare-and-set the revision `current` was read at, apply the result to the
 * local view at once, and run the end-of-life hook exactly once: only the
 * writer whose CAS moved the session out of a live state gets here with it.
 */
export async function writeSession(ctx: SchedulerContext, current: Versioned<Session>, next: Session): Promise<Versioned<Session>> {
  const written = await ctx.sessions.update(ctx.sessions.keyOf(next), next, current.revision);
  ctx.sessionView.apply(ctx.sessions.keyOf(next), written);
  if (isTerminal(next.state) && !isTerminal(current.value.state)) ctx.onTerminal(next);
  return written;
}

export async function writeRunner(ctx: SchedulerContext, next: Runner, revision: number): Promise<Versioned<Runner>> {
  const written = await ctx.runners.update(ctx.runners.keyOf(next), next, revision);
  ctx.runnerView.apply(ctx.runners.keyOf(next), written);
  return written;
}
