// The scheduler's record writes: the transition/fact builders and the CAS that
// applies a revision to the local view. They take a WriteContext, the part of
// the scheduler's context they touch, declared here so that state/ imports
// nothing above it (SchedulerContext extends it).
import { canTransition, ConflictError, isTerminal, type AuditAction, type NewId, type Now, type Runner, type Session, type SessionState } from "@paddock/contracts";
import { CasConflictError, type RunnerRecords, type SessionRecords, type Versioned } from "./store.ts";
import type { KvView } from "./view.ts";

/** The records and views a write touches, and the hook an ending write runs. */
export interface WriteContext {
  now: Now;
  newId: NewId;
  sessions: SessionRecords;
  runners: RunnerRecords;
  sessionView: KvView<typeof Session>;
  runnerView: KvView<typeof Runner>;
  /** Runs once when a session becomes terminal: revoke its token, end its children. */
  onTerminal(s: Session): void;
}

/** The actor id recorded for what the scheduler does on its own (timeouts, reconciliation). */
export const SCHEDULER_ACTOR = "scheduler";

/**
 * Builds the next revision of a session for one transition. Every write is a
 * fact with a fresh event id (the record is the audit outbox). An illegal
 * transition is a typed conflict and is never applied.
 */
export function transition(
  ctx: Pick<WriteContext, "now" | "newId">,
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
  // Why a policy put it where it was (idle, lifetime, drain) no longer holds once it is on its way to run.
  if (to === "queued" || to === "creating" || to === "running") delete next.stateReason;
  return next;
}

/** A new revision that commits `action` without changing state (e.g. a controller attach). */
export function withFact(
  ctx: Pick<WriteContext, "now" | "newId">,
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
export async function writeSession(ctx: WriteContext, current: Versioned<Session>, next: Session): Promise<Versioned<Session>> {
  const written = await ctx.sessions.update(ctx.sessions.keyOf(next), next, current.revision);
  ctx.sessionView.apply(ctx.sessions.keyOf(next), written);
  if (isTerminal(next.state) && !isTerminal(current.value.state)) ctx.onTerminal(next);
  return written;
}

/** writeSession that answers whether it wrote: false when the CAS lost (someone else wrote first). */
export async function casSession(ctx: WriteContext, current: Versioned<Session>, next: Session): Promise<boolean> {
  try {
    await writeSession(ctx, current, next);
    return true;
  } catch (err) {
    if (err instanceof CasConflictError) return false;
    throw err;
  }
}

export async function writeRunner(ctx: WriteContext, next: Runner, revision: number): Promise<Versioned<Runner>> {
  const written = await ctx.runners.update(ctx.runners.keyOf(next), next, revision);
  ctx.runnerView.apply(ctx.runners.keyOf(next), written);
  return written;
}
