import {
  appsOf,
  ConflictError,
  isTerminal,
  NotFoundError,
  sessionKey,
  snapshotOutcome,
  SnapshotStatus,
  type AuditAction,
  type Checkpoint,
  type CreateSessionBody,
  type PendingOp,
  type PolicyReason,
  type Scope,
  type Session,
  type TransferDirection,
  visibleTo,
} from "@paddock/contracts";
import type { SchedulerContext } from "../context.ts";
import { transition, withFact, writeSession } from "../state/writes.ts";
import { checkCreate, createSession } from "./create.ts";
import { endedRevision, getSession, writeEnded } from "./queries.ts";
import { sendCommand } from "../fleet/slots.ts";
import { CasConflictError, type Versioned } from "../state/store.ts";

/**
 * Applies `change` to the current record by CAS, retrying lost races; change
 * may throw a typed error. The first try starts from the local view's copy
 * (one KV read fewer): a stale one loses the CAS, and any answer other than
 * a write (an error, no change) is decided again on a fresh read, so the
 * view's lag never shows in what the caller is told.
 */
async function mutateSession(
  ctx: SchedulerContext,
  scope: Scope,
  sessionId: string,
  change: (current: Versioned<Session>) => Session | undefined,
): Promise<{ before: Session; after: Session }> {
  for (let attempt = 0; ; attempt++) {
    const fromView = attempt === 0 ? ctx.sessionView.get(sessionKey(scope.workspaceId, sessionId)) : undefined;
    // One the caller may not know of is decided on a fresh read (getSession's not_found).
    const viewed = fromView && visibleTo(scope, fromView.value) ? fromView : undefined;
    const current = viewed ?? (await getSession(ctx, scope, sessionId));
    let next: Session | undefined;
    try {
      next = change(current);
    } catch (err) {
      if (viewed) continue;
      throw err;
    }
    if (next === undefined) {
      if (viewed) continue;
      return { before: current.value, after: current.value };
    }
    try {
      await writeSession(ctx, current, next);
      return { before: current.value, after: next };
    } catch (err) {
      if (!(err instanceof CasConflictError)) throw err;
    }
  }
}

const pendingActions: Record<PendingOp["op"], AuditAction> = {
  suspend_warm: "suspend",
  suspend_cold: "suspend",
  resume_warm: "resume",
  snapshot: "snapshot",
  restart_app: "restart",
};

/** A step a policy took (idle, lifetime): said on the fact (its audit event) and on the record. */
export function withReason(s: Session, reason: PolicyReason | undefined): Session {
  return reason === undefined ? s : { ...s, stateReason: reason, lastFact: { ...s.lastFact, reason } };
}

function withPending(ctx: SchedulerContext, s: Session, op: PendingOp["op"], actorId: string): Session {
  const next = withFact(ctx, s, pendingActions[op], actorId);
  next.pending = { op, requestId: ctx.newId("req"), requestedAt: ctx.now() };
  return next;
}

/**
 * Waits (up to operationWaitMs) for the runner to settle the request; the
 * record as it is then, or undefined when it did not. A request the runner
 * refused is a conflict carrying the runner's reason, never an answer that
 * looks like success.
 */
async function waitSettled(ctx: SchedulerContext, s: Session, requestId: string): Promise<Session | undefined> {
  const settled = await ctx.waiters.wait(ctx.sessions.keyOf(s), s, (x) => x.pending?.requestId !== requestId || isTerminal(x.state), ctx.config.operationWaitMs);
  if (settled?.refusal?.requestId === requestId) throw new ConflictError(`the runner refused: ${settled.refusal.reason}`);
  return settled;
}

/**
 * Warm: the runner stops the processes in place and the slot is kept. Cold:
 * the runner checkpoints the workspace, removes the sandbox, and the slot is
 * freed. Answers once the runner confirmed (or with the pending record when it
 * is slow; the pending timeout then moves it on).
 */
export async function suspendSession(
  ctx: SchedulerContext,
  scope: Scope,
  sessionId: string,
  warm: boolean,
  actorId = scope.actor.id,
  reason?: PolicyReason,
  /** A policy's condition on the record as it is written (e.g. still in the placement it judged): else nothing is done. */
  onlyIf?: (s: Session) => boolean,
): Promise<Session> {
  const target = warm ? "suspended_warm" : "suspended_cold";
  const { after } = await mutateSession(ctx, scope, sessionId, ({ value: s }) => {
    if (s.state === target || (onlyIf && !onlyIf(s))) return undefined;
    if (s.pending) throw new ConflictError(`session is busy (${s.pending.op})`);
    if (s.state !== "running" && !(s.state === "suspended_warm" && !warm)) {
      throw new ConflictError(`a ${s.state} session cannot be suspended ${warm ? "warm" : "cold"}`);
    }
    return withReason(withPending(ctx, s, warm ? "suspend_warm" : "suspend_cold", actorId), reason);
  });
  if (!after.pending) return after;
  await sendCommand(ctx, after, { type: "suspend", requestId: after.pending.requestId, warm });
  return (await waitSettled(ctx, after, after.pending.requestId)) ?? after;
}

/** Warm: continue in place. Cold: back to queued; placement restores the checkpoint on any runner of the pool. */
export async function resumeSession(ctx: SchedulerContext, scope: Scope, sessionId: string): Promise<Session> {
  // A suspend under way (an idle one the scheduler started, say) is let finish first: the resume then undoes it.
  const { value: current } = await getSession(ctx, scope, sessionId);
  if (current.pending?.op === "suspend_warm" || current.pending?.op === "suspend_cold") await waitSettled(ctx, current, current.pending.requestId).catch(() => undefined);
  const { before, after } = await mutateSession(ctx, scope, sessionId, ({ value: s }) => {
    if (s.state === "running" || s.state === "queued" || s.state === "creating") return undefined;
    // A resume already under way (a controller's attach woke it, say) is joined: resuming is idempotent.
    if (s.pending?.op === "resume_warm") return undefined;
    if (s.pending) throw new ConflictError(`session is busy (${s.pending.op})`);
    if (s.state === "suspended_warm") {
      const { stateReason: _reason, ...rest } = s;
      return withPending(ctx, rest, "resume_warm", scope.actor.id);
    }
    if (s.state === "suspended_cold") {
      const { pending: _pending, stateReason: _reason, ...rest } = s;
      return transition(ctx, rest, "queued", "resume", scope.actor.id);
    }
    throw new ConflictError(`a ${s.state} session cannot be resumed`);
  });
  if (after.state === "queued") {
    ctx.requestPlacement();
    return (await ctx.waiters.wait(ctx.sessions.keyOf(after), after, (x) => x.state !== "queued" && x.state !== "creating", ctx.config.operationWaitMs)) ?? after;
  }
  if (!after.pending) return after;
  // Only the request that set the pending op sends it; a joined one waits on it.
  if (before !== after) await sendCommand(ctx, after, { type: "resume", requestId: after.pending.requestId });
  return (await waitSettled(ctx, after, after.pending.requestId)) ?? after;
}

/**
 * Checkpoints a running session without stopping it. Answers the checkpoint,
 * or (the runner not done within operationWaitMs: a large workspace) the
 * request to wait on; the outcome lands on the record either way
 * (`snapshot`, `refusal`), never a failure for work that is still going.
 */
export async function snapshotSession(ctx: SchedulerContext, scope: Scope, sessionId: string): Promise<{ requestId: string; checkpoint?: Checkpoint; session: Session }> {
  const { after } = await mutateSession(ctx, scope, sessionId, ({ value: s }) => {
    if (s.state !== "running" && s.state !== "suspended_warm") throw new ConflictError(`a ${s.state} session cannot be snapshotted`);
    if (s.pending) throw new ConflictError(`session is busy (${s.pending.op})`);
    return withPending(ctx, s, "snapshot", scope.actor.id);
  });
  const requestId = after.pending?.requestId ?? "";
  await sendCommand(ctx, after, { type: "checkpoint", requestId });
  const settled = await waitSettled(ctx, after, requestId);
  if (!settled) return { requestId, session: after };
  const outcome = snapshotOutcome(settled, requestId);
  if (outcome.status === SnapshotStatus.taken) return { requestId, checkpoint: outcome.checkpoint, session: settled };
  if (outcome.status === SnapshotStatus.pending) return { requestId, session: settled };
  throw new ConflictError(outcome.status === SnapshotStatus.ended ? `the session ended (${outcome.state}) before the snapshot` : "the runner could not take the snapshot");
}

/** What a replacement is created from: the released session's spec, name, environment, mode and parent. */
function replacementBody(scope: Scope, old: Session): CreateSessionBody {
  return {
    spec: old.spec,
    ...(old.name !== undefined ? { name: old.name } : {}),
    ...(old.environmentId !== undefined ? { environmentId: old.environmentId } : {}),
    // A session's token makes its creates its children anyway (create.ts).
    ...(old.parentId !== undefined && scope.sessionId === undefined ? { parentId: old.parentId } : {}),
    oneShot: old.oneShot,
    mode: old.mode,
  };
}

/**
 * The released session's replacement: the record its successorId names, or
 * that record written now when a recycle was cut short between releasing
 * and creating (a crash, a failed write). Read by id, not scope: the released
 * session names it, and it keeps the released session's creator.
 */
async function replacementOf(ctx: SchedulerContext, scope: Scope, released: Session, successorId: string): Promise<Session> {
  const existing = await ctx.sessions.get(sessionKey(released.workspaceId, successorId));
  if (existing) return existing.value;
  const lineage = { id: successorId, predecessorId: released.id, creatorId: released.creatorId };
  return (await createSession(ctx, scope, replacementBody(scope, released), lineage)).session;
}

/**
 * Releases the session and creates a fresh one with the same spec, under a
 * new id. The release comes first and names the replacement's id
 * (`successorId`) in the same write, which commits the one `recycle` fact
 * (docs/audit.md); the replacement then names its predecessor. Asked again
 * (a retry, a concurrent recycle), a released session answers the same pair,
 * writing the replacement if the first call never got to it.
 */
export async function recycleSession(ctx: SchedulerContext, scope: Scope, sessionId: string): Promise<{ released: Session; session: Session }> {
  for (;;) {
    const current = await getSession(ctx, scope, sessionId);
    const old = current.value;
    if (old.successorId !== undefined) return { released: old, session: await replacementOf(ctx, scope, old, old.successorId) };
    // Refused before anything is released (an environment gone, a parent ended).
    await checkCreate(ctx, scope, replacementBody(scope, old));
    const successorId = ctx.newId("ses");
    // An ended session (a one-shot that exited) is recycled too: the link is a fact of its own on its record.
    const released = isTerminal(old.state)
      ? { ...withFact(ctx, old, "recycle", scope.actor.id), successorId }
      : endedRevision(ctx, old, scope.actor.id, { action: "recycle", patch: { successorId } });
    if (!(await writeEnded(ctx, current, released))) continue;
    return { released, session: await replacementOf(ctx, scope, released, successorId) };
  }
}

/**
 * Starts the next generation of one app (trigger manual) and answers once the
 * runner reported it started (the record's `apps[app]` is the new
 * generation), or with the pending record when the runner is slow.
 */
export async function restartApp(ctx: SchedulerContext, scope: Scope, sessionId: string, app: string): Promise<Session> {
  const { after } = await mutateSession(ctx, scope, sessionId, ({ value: s }) => {
    if (!appsOf(s.spec).some((a) => a.name === app)) throw new NotFoundError("app");
    if (s.state !== "running") throw new ConflictError(`apps of a ${s.state} session cannot be restarted`);
    if (s.pending) throw new ConflictError(`session is busy (${s.pending.op})`);
    return withPending(ctx, s, "restart_app", scope.actor.id);
  });
  const requestId = after.pending?.requestId ?? "";
  await sendCommand(ctx, after, { type: "restart_app", requestId, app, trigger: "manual" });
  return (await waitSettled(ctx, after, requestId)) ?? after;
}

/** A workspace push or pull, or a file written or removed, happened: one revision commits it (and so one audit event). */
export async function recordTransfer(ctx: SchedulerContext, scope: Scope, sessionId: string, direction: TransferDirection): Promise<Session> {
  const { after } = await mutateSession(ctx, scope, sessionId, ({ value: s }) => withFact(ctx, s, direction, scope.actor.id));
  return after;
}
