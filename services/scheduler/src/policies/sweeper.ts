import { isTerminal, occupiesSlot, type Session } from "@paddock/contracts";
import type { SchedulerContext } from "../context.ts";
import { casSession, SCHEDULER_ACTOR, transition, withFact } from "../state/writes.ts";
import { resumeSession, suspendSession } from "../api/lifecycle.ts";
import { deleteSession } from "../api/queries.ts";
import { dispatchDestroy, dispatchStart, releaseSlot, runnerGenerationOf, sendCommand } from "../fleet/slots.ts";
import { lostRunners, markRunnerLost, repairCapacity } from "../fleet/liveness.ts";
import { perPass, type FactBacklog } from "../state/fact-backlog.ts";
import { drainRunners, newDrainMemory, type DrainMemory } from "./drain.ts";

const SECOND_MS = 1_000;
/** Records a sweep reads between turns of the event loop. */
const SWEEP_SLICE = 5_000;
const schedulerScope = (s: Session) => ({ workspaceId: s.workspaceId, actor: { id: SCHEDULER_ACTOR, kind: "service" as const } });

/** What the sweep does to one record now, if anything. */
type SweepStep =
  | { kind: "timeout"; to: "failed"; reason: string }
  | { kind: "clear_pending"; reason: string }
  | { kind: "expire_suspended" }
  | { kind: "expire_record" }
  | { kind: "idle_suspend"; warm: boolean }
  | { kind: "lifetime_end" }
  | { kind: "periodic_checkpoint"; requestId: string }
  | { kind: "redispatch" }
  | { kind: "move_on" };

/** What a replica's sweeps remember between passes. */
export interface SweepMemory {
  /** `<session>.<placementGeneration>` → the redispatch window last re-sent in. */
  redispatched: Map<string, number>;
  /**
   * `<session>.<placementGeneration>` → the stream sequence of its runner's
   * latest fact when the creating timeout fell due: the timeout applies once
   * the facts consumer has settled everything up to it.
   */
  timeoutBarriers: Map<string, number>;
  /**
   * `<session>.<placementGeneration>` → the write time of the first running
   * revision this replica's sweep saw (after a start, a resume or a warm
   * resume): the idle window of a watch session never reaches back before it.
   */
  runningSince: Map<string, number>;
  /** The moves off draining runners this replica has under way (drain.ts). */
  drain: DrainMemory;
}

export function newSweepMemory(): SweepMemory {
  return { redispatched: new Map(), timeoutBarriers: new Map(), runningSince: new Map(), drain: newDrainMemory() };
}

const placementKey = (s: Session) => `${s.id}.${s.placementGeneration}`;

/**
 * Whether a creating session's timeout may apply now: every fact its runner
 * had published when the timeout fell due has been settled (none of them was
 * its start), or twice the timeout has passed (a fact consumer that never
 * catches up must not keep a session creating forever).
 */
async function runnerHeard(ctx: SchedulerContext, s: Session, memory: SweepMemory, backlog: FactBacklog): Promise<boolean> {
  if (!s.poolId || !s.runnerId || ctx.now() - s.updatedAt > 2 * ctx.config.creatingTimeoutMs) return true;
  const key = placementKey(s);
  const known = memory.timeoutBarriers.get(key);
  const barrier = known ?? (await backlog.lastFactSeq(s.poolId, s.runnerId));
  memory.timeoutBarriers.set(key, barrier);
  const settled = await backlog.settledThrough();
  if (settled >= barrier) return true;
  if (known === undefined) ctx.log.info({ sessionId: s.id, runnerId: s.runnerId, barrier, settled }, "creating timeout waits until the runner's facts are applied");
  return false;
}

function stepFor(ctx: SchedulerContext, s: Session, startedAt: number, memory: SweepMemory): SweepStep | undefined {
  const now = ctx.now();
  const age = now - s.updatedAt;
  const c = ctx.config;
  if (s.state === "queued" && age > c.queuedTimeoutMs) {
    return { kind: "timeout", to: "failed", reason: `not placed within ${Math.round(c.queuedTimeoutMs / SECOND_MS)} s: no eligible runner with capacity` };
  }
  if (s.state === "creating" && age > c.creatingTimeoutMs) {
    return { kind: "timeout", to: "failed", reason: `runner did not start the sandbox within ${Math.round(c.creatingTimeoutMs / SECOND_MS)} s` };
  }
  // A scheduler killed between placing and dispatching leaves a start unsent;
  // re-sending it is safe (same msg id; the runner dedupes by placement generation).
  // Once per window, not on every tick: each re-send re-mints the token and publishes.
  if (s.state === "creating" && age > c.redispatchAfterMs) {
    const key = `${s.id}.${s.placementGeneration}`;
    const window = Math.floor(age / c.redispatchAfterMs);
    if (memory.redispatched.get(key) !== window) {
      memory.redispatched.set(key, window);
      return { kind: "redispatch" };
    }
  }
  if (s.pending && now - s.pending.requestedAt > c.pendingTimeoutMs) {
    return { kind: "clear_pending", reason: `${s.pending.op} not confirmed by the runner within ${Math.round(c.pendingTimeoutMs / SECOND_MS)} s` };
  }
  if (s.state === "suspended_cold" && !s.pending && movesOn(s)) return { kind: "move_on" };
  if (s.state === "suspended_cold" && age > c.suspendedTtlMs) return { kind: "expire_suspended" };
  if (isTerminal(s.state) && age > c.terminalTtlMs) return { kind: "expire_record" };
  if (s.maxLifetimeMs !== undefined && !isTerminal(s.state) && now - s.createdAt > s.maxLifetimeMs) return { kind: "lifetime_end" };
  const idle = idleStep(ctx, s, startedAt, memory);
  if (idle) return idle;
  if (s.state !== "running" || s.pending) return undefined;
  if (c.checkpointIntervalMs > 0 && now - (s.checkpointedAt ?? s.updatedAt) > c.checkpointIntervalMs) {
    // The same id on every replica within one interval: DISPATCH dedupes it to one checkpoint.
    return { kind: "periodic_checkpoint", requestId: `chk_${Math.floor(now / c.checkpointIntervalMs)}` };
  }
  return undefined;
}

/**
 * A cold-suspended session the scheduler took off its runner to run it
 * elsewhere (a drain, a lost runner): the record says so, so any replica
 * finishes the move even if the one that started it died between its halves.
 */
function movesOn(s: Session): boolean {
  return s.stateReason === "drain" || s.lastFact.action === "lose";
}

/** The session's idle policy, else watch mode's cold suspend after idleMs. */
function idlePolicyOf(ctx: SchedulerContext, s: Session): { warmAfterMs?: number | undefined; coldAfterMs?: number | undefined } | undefined {
  return s.idle ?? (s.mode === "watch" ? { coldAfterMs: ctx.config.idleMs } : undefined);
}

/**
 * The idle policy (the session's, else watch mode's cold suspend after
 * idleMs): nothing attached, and no activity for warmAfterMs (running →
 * warm) or coldAfterMs (running or warm → cold). Real activity only: attach
 * and detach, what the runner reports (terminal output, exec, file calls,
 * previews), becoming running; never updatedAt, which every checkpoint and
 * app fact moves. Input needs an attached client, so attachment covers it.
 */
function idleStep(ctx: SchedulerContext, s: Session, startedAt: number, memory: SweepMemory): SweepStep | undefined {
  const policy = idlePolicyOf(ctx, s);
  if (!policy || s.pending || (s.state !== "running" && s.state !== "suspended_warm") || ctx.presence.attached(s.id)) return undefined;
  const now = ctx.now();
  const lastActivity = Math.max(ctx.presence.lastAttachedAt(s.id) ?? 0, ctx.presence.lastActiveAt(s) ?? 0, memory.runningSince.get(placementKey(s)) ?? (s.state === "running" ? now : 0), startedAt);
  const idleFor = now - lastActivity;
  if (policy.coldAfterMs !== undefined && idleFor > policy.coldAfterMs) return { kind: "idle_suspend", warm: false };
  if (s.state === "running" && policy.warmAfterMs !== undefined && idleFor > policy.warmAfterMs) return { kind: "idle_suspend", warm: true };
  return undefined;
}

async function apply(ctx: SchedulerContext, key: string, step: SweepStep): Promise<void> {
  const current = await ctx.sessions.get(key);
  if (!current) return;
  const s = current.value;
  switch (step.kind) {
    case "timeout": {
      const { pending: _p, ...rest } = s;
      if (await casSession(ctx, current, transition(ctx, rest, step.to, "timeout", SCHEDULER_ACTOR, { error: step.reason }))) {
        if (occupiesSlot(s.state)) await releaseSlot(ctx, s.poolId, s.runnerId);
        ctx.requestPlacement();
      }
      return;
    }
    case "clear_pending": {
      const { pending: _p, ...rest } = s;
      await casSession(ctx, current, withFact(ctx, rest, "timeout", SCHEDULER_ACTOR));
      return;
    }
    case "expire_suspended":
      await casSession(ctx, current, transition(ctx, s, "destroyed", "expire", SCHEDULER_ACTOR));
      return;
    case "expire_record":
      if (s.state === "dead") await dispatchDestroy(ctx, s);
      // One last revision commits the expiry (the audit feed sees it), then the key goes.
      if (await casSession(ctx, current, withFact(ctx, s, "expire", SCHEDULER_ACTOR))) await ctx.sessions.remove(key);
      return;
    case "idle_suspend":
      void suspendSession(ctx, schedulerScope(s), s.id, step.warm, SCHEDULER_ACTOR, "idle").catch((err: unknown) =>
        ctx.log.warn({ err, sessionId: s.id }, "idle suspend failed"),
      );
      return;
    case "lifetime_end":
      await deleteSession(ctx, schedulerScope(s), s.id, "lifetime");
      return;
    case "periodic_checkpoint":
      await sendCommand(ctx, s, { type: "checkpoint", requestId: step.requestId });
      return;
    case "move_on":
      if (s.state !== "suspended_cold" || s.pending || !movesOn(s)) return;
      void resumeSession(ctx, schedulerScope(s), s.id).catch((err: unknown) => ctx.log.warn({ err, sessionId: s.id }, "resuming a moved session failed"));
      return;
    case "redispatch": {
      const generation = s.state === "creating" ? await runnerGenerationOf(ctx, s) : undefined;
      if (generation !== undefined) await dispatchStart(ctx, s, generation);
      return;
    }
  }
}

/**
 * One pass of the policies that keep every session moving: timeouts of every
 * transitional state, record TTLs, idle suspend of watch sessions, periodic
 * checkpoints, moves off draining runners. Every replica sweeps; each change is a compare-and-set, so a
 * race between replicas applies it once.
 */
export async function sweep(ctx: SchedulerContext, startedAt: number, memory: SweepMemory = newSweepMemory()): Promise<void> {
  for (const runner of lostRunners(ctx, startedAt)) {
    await markRunnerLost(ctx, runner).catch((err: unknown) => ctx.log.warn({ err, runnerId: runner.id }, "marking runner lost failed"));
  }
  await repairCapacity(ctx).catch((err: unknown) => ctx.log.warn({ err }, "capacity repair failed"));
  drainRunners(ctx, memory.drain);
  const due: Array<[Session, SweepStep]> = [];
  // Only what a later pass needs is remembered, and nothing is allocated for a
  // record with nothing due: a pass reads every record each tick (100,000 at scale).
  const creating = new Set<string>();
  const running = new Set<string>();
  let read = 0;
  for (const { value } of ctx.sessionView.values()) {
    if (value.state === "creating") creating.add(placementKey(value));
    // The revision a replica first sees running was written at or after the session became
    // running; only an idle policy (idleStep) asks when that was.
    if (value.state === "running" && idlePolicyOf(ctx, value)) {
      const key = placementKey(value);
      running.add(key);
      if (!memory.runningSince.has(key)) memory.runningSince.set(key, value.updatedAt);
    }
    const step = stepFor(ctx, value, startedAt, memory);
    if (step) due.push([value, step]);
    // Let requests in between slices of a large view (the Map's iterator survives changes meanwhile).
    if (++read % SWEEP_SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  // Forget placements that are no longer creating.
  for (const key of memory.redispatched.keys()) if (!creating.has(key)) memory.redispatched.delete(key);
  for (const key of memory.timeoutBarriers.keys()) if (!creating.has(key)) memory.timeoutBarriers.delete(key);
  for (const key of memory.runningSince.keys()) if (!running.has(key)) memory.runningSince.delete(key);
  const backlog = perPass(ctx.factBacklog);
  for (const [s, step] of due) {
    const key = ctx.sessions.keyOf(s);
    try {
      if (step.kind === "timeout" && s.state === "creating" && !(await runnerHeard(ctx, s, memory, backlog))) continue;
      await apply(ctx, key, step);
    } catch (err) {
      ctx.log.warn({ err, key, step: step.kind }, "sweep step failed");
    }
  }
}
