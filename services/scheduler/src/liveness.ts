import type { KV } from "@nats-io/kv";
import { occupiesSlot, runnerKey, type Now, type Runner, type Session } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { SCHEDULER_ACTOR, transition, writeRunner, writeSession, type SchedulerContext } from "./context.ts";
import { CasConflictError } from "./store.ts";
import { recentlyReserved } from "./slots.ts";

interface LeaseSeen {
  /** Last renewal this replica saw. */
  renewedAt?: number;
  /** When this replica saw the key expire (a TTL delete marker) or go. */
  expiredAt?: number;
}

/**
 * What the runner leases say, from a watch of `runner-leases`. A lease is a
 * KV key with a per-message TTL that the runner renews; when the runner stops,
 * the server expires the key and the watch sees its delete marker.
 */
export class LeaseTracker {
  private readonly seen = new Map<string, LeaseSeen>();
  /** The server's timestamp of each runner's latest renewal (the lease entry's own time). */
  private readonly renewals = new Map<string, number>();
  private stopWatch: (() => void) | undefined;

  constructor(private readonly now: Now) {}

  async start(kv: KV, log: Logger): Promise<void> {
    const watch = await kv.watch();
    this.stopWatch = () => watch.stop();
    void (async () => {
      for await (const e of watch) {
        if (e.operation === "PUT") {
          this.seen.set(e.key, { renewedAt: this.now() });
          this.renewals.set(e.key, e.created.getTime());
        }
        else this.seen.set(e.key, { ...this.seen.get(e.key), expiredAt: this.now() });
      }
    })().catch((err: unknown) => log.error({ err }, "lease watch ended"));
  }

  stop(): void {
    this.stopWatch?.();
  }

  /**
   * The record with `lastSeenAt` following the lease: the latest renewal's
   * server time when it is newer than the record's (set at registration).
   * Derived at read time, so renewals never become runner-record writes
   * (and audit revisions).
   */
  withLastSeen(runner: Runner): Runner {
    const renewed = this.renewals.get(runnerKey(runner.poolId, runner.id));
    return renewed !== undefined && renewed > runner.lastSeenAt ? { ...runner, lastSeenAt: renewed } : runner;
  }

  /**
   * Whether the runner's lease has been gone for longer than the grace period.
   * A lease never seen by this replica counts from its start, plus one TTL.
   */
  expiredFor(key: string, startedAt: number, leaseTtlMs: number, graceMs: number): boolean {
    const s = this.seen.get(key);
    const now = this.now();
    if (s?.expiredAt !== undefined && (s.renewedAt === undefined || s.expiredAt >= s.renewedAt)) return now - s.expiredAt > graceMs;
    if (s?.renewedAt !== undefined) return false;
    return now - startedAt > leaseTtlMs + graceMs;
  }
}

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
export async function markRunnerLost(ctx: SchedulerContext, runner: Runner): Promise<void> {
  const key = runnerKey(runner.poolId, runner.id);
  const current = await ctx.runners.get(key);
  if (!current || current.value.state === "lost" || current.value.generation !== runner.generation) return;
  try {
    await writeRunner(ctx, { ...current.value, state: "lost", lostReason: "lease expired", capacityUsed: 0 }, current.revision);
  } catch (err) {
    if (err instanceof CasConflictError) return;
    throw err;
  }
  ctx.log.warn({ runnerId: runner.id, poolId: runner.poolId, generation: runner.generation }, "runner lost");
  for (const { value } of ctx.sessionView.values()) {
    if (value.runnerId === runner.id && value.poolId === runner.poolId && occupiesSlot(value.state)) {
      await loseSession(ctx, value, runner.id);
    }
  }
  ctx.requestPlacement();
}

/** Runners whose lease has been gone longer than the grace period. */
export function lostRunners(ctx: SchedulerContext, startedAt: number): Runner[] {
  const lost: Runner[] = [];
  for (const { value } of ctx.runnerView.values()) {
    if (value.state === "lost") continue;
    if (ctx.leases.expiredFor(runnerKey(value.poolId, value.id), startedAt, ctx.config.leaseTtlMs, ctx.config.lostGraceMs)) lost.push(value);
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
  const used = new Map<string, number>();
  for (const { value } of ctx.sessionView.values()) {
    if (value.runnerId && value.poolId && occupiesSlot(value.state)) {
      const key = runnerKey(value.poolId, value.runnerId);
      used.set(key, (used.get(key) ?? 0) + 1);
    }
  }
  const now = ctx.now();
  const windowMs = ctx.config.capacityRepairQuietMs;
  const repaired = (r: Runner, actual: number): number | undefined => {
    if (r.state === "lost") return undefined;
    if (r.capacityUsed < actual) return actual;
    const ceiling = actual + recentlyReserved(r, now, windowMs);
    return r.capacityUsed > ceiling ? ceiling : undefined;
  };
  for (const { value } of ctx.runnerView.values()) {
    const key = runnerKey(value.poolId, value.id);
    const actual = used.get(key) ?? 0;
    if (repaired(value, actual) === undefined) continue;
    const written = await ctx.runners.mutate(key, (r) => {
      const capacityUsed = repaired(r, actual);
      return capacityUsed === undefined ? undefined : { ...r, capacityUsed };
    });
    if (written) ctx.runnerView.apply(key, written);
  }
}
