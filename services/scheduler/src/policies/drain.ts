/**
 * Draining a runner moves what it holds (issue #29 item 6): each running
 * session on a `draining` runner is cold-suspended (its workspace
 * checkpointed, its slot freed) with reason `drain`, then resumed; placement
 * never picks a draining runner, so the resume lands on another runner of the
 * pool, which restores the checkpoint. A warm-suspended session is
 * cold-suspended and left suspended (it was not running; a later resume lands
 * elsewhere). Sessions still creating are moved once they run; a session
 * with an operation pending is left to it.
 *
 * The resume half is durable: the record says `stateReason: drain` once
 * suspended, and any replica's sweep resumes such a session (sweeper.ts,
 * `move_on`), so a replica that dies between the halves leaves nothing
 * stuck. The replica that suspended resumes at once, for speed.
 *
 * Bounded: at most DRAIN_PARALLEL moves per draining runner at a time (each
 * checkpoints a workspace; a runner restoring many at once is slow for all),
 * and no more moves in a pool than it has free slots on active runners (a
 * move with nowhere to go would turn a running session into a queued one).
 * Each step goes through the same fenced, audited operations a client asks
 * for, as the scheduler's actor; races between replicas are settled by their
 * compare-and-set (the loser's suspend is a no-op or a `conflict`, ignored).
 */
import { occupiesSlot, type Runner, type Session } from "@paddock/contracts";
import type { SchedulerContext } from "../context.ts";
import { resumeSession, suspendSession } from "../api/lifecycle.ts";
import { SCHEDULER_ACTOR } from "../state/writes.ts";

/** Moves in flight per draining runner (this replica's, plus suspends any replica has pending there). */
export const DRAIN_PARALLEL = 2;

/** Session keys whose move this replica has under way. */
export type DrainMemory = Set<string>;

export function newDrainMemory(): DrainMemory {
  return new Set();
}

/** A session to cold-suspend, and whether it is resumed elsewhere after (it was running). */
export interface DrainMove {
  session: Session;
  resumeAfter: boolean;
}

const runnerOf = (s: Pick<Session, "poolId" | "runnerId">) => `${s.poolId ?? ""}.${s.runnerId ?? ""}`;

/** Free slots per pool on runners placement may use, less what is queued there (it takes them first). */
function freeSlotsByPool(sessions: readonly Session[], runners: Iterable<Runner>): Map<string, number> {
  const free = new Map<string, number>();
  for (const r of runners) if (r.state === "active") free.set(r.poolId, (free.get(r.poolId) ?? 0) + Math.max(0, r.capacityTotal - r.capacityUsed));
  for (const s of sessions) if (s.state === "queued" && s.poolId !== undefined) free.set(s.poolId, (free.get(s.poolId) ?? 0) - 1);
  return free;
}

/** The moves one pass starts, from the views and this replica's moves under way (pure: the sweep applies it). */
export function planDrain(sessions: readonly Session[], keyOf: (s: Session) => string, runners: readonly Runner[], underWay: DrainMemory): DrainMove[] {
  const draining = new Set(runners.filter((r) => r.state === "draining").map((r) => `${r.poolId}.${r.id}`));
  if (draining.size === 0) return [];
  const busy = new Map<string, number>();
  const candidates: Session[] = [];
  for (const s of sessions) {
    if (!draining.has(runnerOf(s)) || !occupiesSlot(s.state)) continue;
    if (s.pending?.op === "suspend_cold" || underWay.has(keyOf(s))) busy.set(runnerOf(s), (busy.get(runnerOf(s)) ?? 0) + 1);
    else if (!s.pending && (s.state === "running" || s.state === "suspended_warm")) candidates.push(s);
  }
  const free = freeSlotsByPool(sessions, runners);
  for (const [runner, n] of busy) {
    const pool = runner.slice(0, runner.indexOf("."));
    free.set(pool, (free.get(pool) ?? 0) - n);
  }
  // Oldest first, so a drain moves sessions in a stable order.
  candidates.sort((a, b) => a.createdAt - b.createdAt);
  const moves: DrainMove[] = [];
  for (const s of candidates) {
    const n = busy.get(runnerOf(s)) ?? 0;
    if (n >= DRAIN_PARALLEL) continue;
    const resumeAfter = s.state === "running";
    const pool = s.poolId ?? "";
    // A warm-suspended session is not resumed: it needs no slot elsewhere.
    if (resumeAfter && (free.get(pool) ?? 0) <= 0) continue;
    if (resumeAfter) free.set(pool, (free.get(pool) ?? 0) - 1);
    busy.set(runnerOf(s), n + 1);
    moves.push({ session: s, resumeAfter });
  }
  return moves;
}

const schedulerScope = (s: Session) => ({ workspaceId: s.workspaceId, actor: { id: SCHEDULER_ACTOR, kind: "service" as const } });

/**
 * One pass: starts the moves the plan allows, without waiting for them (a
 * cold suspend waits for the runner's checkpoint; the sweep must not).
 */
export function drainRunners(ctx: SchedulerContext, underWay: DrainMemory): void {
  const runners = [...ctx.runnerView.values()].map((v) => v.value);
  if (!runners.some((r) => r.state === "draining")) return;
  const sessions = [...ctx.sessionView.values()].map((v) => v.value);
  for (const move of planDrain(sessions, (s) => ctx.sessions.keyOf(s), runners, underWay)) {
    const key = ctx.sessions.keyOf(move.session);
    underWay.add(key);
    void moveOff(ctx, move)
      .catch((err: unknown) => ctx.log.warn({ err, sessionId: move.session.id }, "drain: moving the session failed; a later sweep tries again"))
      .finally(() => underWay.delete(key));
  }
}

async function moveOff(ctx: SchedulerContext, { session, resumeAfter }: DrainMove): Promise<void> {
  // Only in the placement judged here: another replica may have moved it meanwhile (its view was newer).
  const samePlacement = (s: Session) => s.poolId === session.poolId && s.runnerId === session.runnerId && s.placementGeneration === session.placementGeneration;
  const scope = schedulerScope(session);
  const after = await suspendSession(ctx, scope, session.id, false, SCHEDULER_ACTOR, resumeAfter ? "drain" : undefined, samePlacement);
  if (!samePlacement(after)) return;
  ctx.log.info({ sessionId: session.id, runnerId: session.runnerId, state: after.state }, "drain: cold-suspended");
  // Not settled within the call's wait: the sweep resumes it once it is (the record says drain).
  if (!resumeAfter || after.state !== "suspended_cold") return;
  const resumed = await resumeSession(ctx, scope, session.id);
  ctx.log.info({ sessionId: session.id, from: session.runnerId, to: resumed.runnerId, state: resumed.state }, "drain: resumed");
}
