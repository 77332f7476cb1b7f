import { occupiesSlot, runnerKey, type Runner, type Session } from "@paddock/contracts";
import type { SchedulerContext } from "../context.ts";
import { SCHEDULER_ACTOR, transition, writeRunner, writeSession } from "../state/writes.ts";
import { CasConflictError } from "../state/store.ts";
import { recentlyReserved } from "./slots.ts";

/**
 * The lost-runner policy for one session placed on a lost runner: with a
 * checkpoint it is moved on (suspended cold, then queued to resume on any
 * runner of the pool from that checkpoint); without one it ends dead with
 * reason runner_lost. Each step is a CAS, so replicas racing apply it once.
 */
async function loseSession(ctx: SchedulerContext, s: Session, runnerId: string): Promise<void> {
  const key = ctx.sessions.keyOf(s);
  for (;;) {
    const current = await ctx.sessions.get(key);
    const c = current?.value;
    if (!current || !c || c.runnerId !== runnerId || !occupiesSlot(c.state)) return;
    const { pending: _p, ...rest } = c;
    const resumable = c.checkpoint !== undefined && c.state !== "creating";
    const next = resumable
      ? transition(ctx, rest, "suspended_cold", "lose", SCHEDULER_ACTOR, { error: "runner_lost: resuming from the last checkpoint" })
      : transition(ctx, rest, "dead", "lose", SCHEDULER_ACTOR, { error: "runner_lost: the runner's lease expired" });
    try {
      const written = await writeSession(ctx, current, next);
      if (resumable) {
        const requeued = transition(ctx, next, "queued", "resume", SCHEDULER_ACTOR);
        await writeSession(ctx, written, requeued).catch((err: unknown) => {
          if (!(err instanceof CasConflictError)) throw err;
        });
      }
      return;
    } catch (err) {
      if (!(err instanceof CasConflictError)) throw err;
    }
  }
}

/** Declares a runner lost (CAS on its record) and applies the policy to what it held. */
export async function markRunnerLost(ctx: SchedulerContext, runner: Runner, lostReason = "lease expired"): Promise<boolean> {
  const key = runnerKey(runner.poolId, runner.id);
  const current = await ctx.runners.get(key);
  if (!current || current.value.state === "lost" || current.value.generation !== runner.generation) return false;
  try {
    const was = current.value.state;
    const kept = was === "draining" || was === "cordoned" ? { stateBeforeLost: was } : {};
    await writeRunner(ctx, { ...current.value, state: "lost", lostReason, capacityUsed: 0, ...kept }, current.revision);
  } catch (err) {
    if (err instanceof CasConflictError) return false;
    throw err;
  }
  ctx.log.warn({ runnerId: runner.id, poolId: runner.poolId, generation: runner.generation, lostReason }, "runner lost");
  // A copy: each loss moves its record off the runner's set.
  for (const key of [...ctx.sessionIndex.placedOn(runner.poolId, runner.id)]) {
    const value = ctx.sessionView.get(key)?.value;
    if (value?.runnerId === runner.id && value.poolId === runner.poolId && occupiesSlot(value.state)) {
      await loseSession(ctx, value, runner.id);
    }
  }
  ctx.requestPlacement();
  return true;
}

/**
 * A revoked runner (the gateway closed its connections and its nkey is
 * refused): lost at once, through the same path as an expired lease, so its
 * sessions resume elsewhere from their last checkpoint.
 */
export async function loseRunnerNow(ctx: SchedulerContext, poolId: string, runnerId: string, reason: string): Promise<boolean> {
  const current = await ctx.runners.get(runnerKey(poolId, runnerId));
  if (!current) return false;
  return markRunnerLost(ctx, current.value, reason);
}

/** Runners whose lease has been gone longer than the grace period. */
export function lostRunners(ctx: SchedulerContext, startedAt: number): Runner[] {
  const lost: Runner[] = [];
  for (const { value } of ctx.runnerView.values()) {
    if (value.state === "lost") continue;
    // The stored lastSeenAt is the latest registration's time (renewals are never written).
    const since = Math.max(startedAt, value.lastSeenAt);
    if (ctx.leases.expiredFor(runnerKey(value.poolId, value.id), since, ctx.config.leaseTtlMs, ctx.config.lostGraceMs)) lost.push(value);
  }
  return lost;
}

/**
 * Repairs a runner's slot count from the sessions placed on it. A scheduler
 * killed between reserving a slot and placing the session leaks one, and so
 * does a release lost to a broker failover. The count is raised to what the
 * view shows placed, or lowered to that plus what was reserved within the
 * repair window (a reservation's sessions are written just after it), so a
 * placement in flight is never undone. It need not wait for a quiet runner:
 * under a steady backlog none is ever quiet, and leaked slots would throttle
 * it to the few left free (found by `pnpm chaos`, broker: create → end p50
 * 17 s with both runners at 31-32 of 32 slots and a handful of sessions live).
 */
export async function repairCapacity(ctx: SchedulerContext): Promise<void> {
  const now = ctx.now();
  const windowMs = ctx.config.capacityRepairQuietMs;
  const repaired = (r: Runner, actual: number): number | undefined => {
    if (r.state === "lost") return undefined;
    if (r.capacityUsed < actual) return actual;
    const ceiling = actual + recentlyReserved(r, now, windowMs);
    return r.capacityUsed > ceiling ? ceiling : undefined;
  };
  for (const { value } of ctx.runnerView.values()) {
    const actual = ctx.sessionIndex.placedOn(value.poolId, value.id).size;
    if (repaired(value, actual) === undefined) continue;
    const key = runnerKey(value.poolId, value.id);
    const written = await ctx.runners.mutate(key, (r) => {
      const capacityUsed = repaired(r, actual);
      return capacityUsed === undefined ? undefined : { ...r, capacityUsed };
    });
    if (written) ctx.runnerView.apply(key, written);
  }
}
