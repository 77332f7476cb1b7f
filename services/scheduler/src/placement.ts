import { environmentKey, sessionKey, type Requirements, type Runner, type Session } from "@paddock/contracts";
import { overridesImage } from "./layering.ts";
import { SCHEDULER_ACTOR, transition, writeSession, type SchedulerContext } from "./context.ts";
import { dispatchStart, releaseSlot, reserveSlot } from "./slots.ts";
import { CasConflictError } from "./store.ts";

/** Whether a runner offers what the session requires: every capability, and at least the minimum resources. */
export function satisfies(runner: Runner, req: Requirements | undefined): boolean {
  if (!req) return true;
  if (!req.capabilities.every((c) => runner.capabilities.includes(c))) return false;
  const r = runner.resources;
  if (!r) return req.minCpuMillis === 0 && req.minMemoryBytes === 0 && req.minDiskBytes === 0;
  return r.cpuMillis >= req.minCpuMillis && r.memoryBytes >= req.minMemoryBytes && r.diskBytes >= req.minDiskBytes;
}

/**
 * Runners that may take the session now: active (not draining, cordoned or
 * lost), with a free slot, meeting its requirements, in its pool once it has
 * one (a resume stays in its pool; a new session may go to any eligible pool).
 */
function eligibleRunners(ctx: SchedulerContext, s: Session): Runner[] {
  const runners: Runner[] = [];
  for (const { value } of ctx.runnerView.values()) {
    if (s.poolId !== undefined && value.poolId !== s.poolId) continue;
    if (value.state === "active" && value.capacityUsed < value.capacityTotal && satisfies(value, s.requirements)) runners.push(value);
  }
  // Most free capacity first spreads load; id breaks ties deterministically.
  return runners.sort((a, b) => b.capacityTotal - b.capacityUsed - (a.capacityTotal - a.capacityUsed) || a.id.localeCompare(b.id));
}

function queuedOldestFirst(ctx: SchedulerContext): Session[] {
  const queued: Session[] = [];
  for (const { value } of ctx.sessionView.values()) if (value.state === "queued") queued.push(value);
  return queued.sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id));
}

type PlaceOutcome = "placed" | "no_capacity" | "lost_race" | "waiting";

/** A fresh boot that would run its environment's setup (no valid snapshot, image not overridden). */
function buildsSetup(ctx: SchedulerContext, s: Session): boolean {
  if (s.environmentId === undefined || s.placementGeneration > 0) return false;
  const env = ctx.envs.view.get(environmentKey(s.workspaceId, s.environmentId))?.value;
  if (!env?.setup || overridesImage(env, s.spec)) return false;
  return !(env.snapshot && env.snapshotHash === env.setupHash && env.setupHash === s.setupHash);
}

/**
 * Setup runs once per setupHash: while one session of the environment is
 * building it (creating), the others wait queued and then boot from its
 * snapshot. If the builder fails, the next one builds; the queued timeout
 * bounds the wait.
 */
function waitsForSetupBuild(ctx: SchedulerContext, s: Session): boolean {
  if (!buildsSetup(ctx, s)) return false;
  for (const { value: t } of ctx.sessionView.values()) {
    if (t.id !== s.id && t.state === "creating" && t.environmentId === s.environmentId && t.setupHash === s.setupHash && t.placementGeneration === 1) {
      return true;
    }
  }
  return false;
}

/**
 * Places one queued session: reserve a slot on a runner (CAS on the runner),
 * then move the session to creating with the next placement generation (CAS on
 * the session), then dispatch. Losing the second CAS gives the slot back.
 */
async function placeOne(ctx: SchedulerContext, queued: Session, spread: number): Promise<PlaceOutcome> {
  if (waitsForSetupBuild(ctx, queued)) return "waiting";
  const eligible = eligibleRunners(ctx, queued);
  // Concurrent placements start at different runners so their CASes rarely collide.
  const offset = eligible.length > 0 ? spread % Math.min(eligible.length, 8) : 0;
  for (const runner of [...eligible.slice(offset), ...eligible.slice(0, offset)]) {
    const poolId = runner.poolId;
    const runnerGeneration = await reserveSlot(ctx, poolId, runner.id);
    if (runnerGeneration === undefined) continue;
    // The view's revision is the CAS precondition: if it is stale the write loses and the slot goes back.
    const current = ctx.sessionView.get(sessionKey(queued.workspaceId, queued.id));
    if (!current || current.value.state !== "queued") {
      await releaseSlot(ctx, poolId, runner.id);
      return "lost_race";
    }
    const next = transition(ctx, current.value, "creating", "place", SCHEDULER_ACTOR, {
      poolId,
      runnerId: runner.id,
      placementGeneration: current.value.placementGeneration + 1,
    });
    try {
      await writeSession(ctx, current, next);
    } catch (err) {
      await releaseSlot(ctx, poolId, runner.id);
      if (err instanceof CasConflictError) return "lost_race";
      throw err;
    }
    ctx.metrics.placements.inc();
    await dispatchStart(ctx, next, runnerGeneration);
    return "placed";
  }
  return "no_capacity";
}

/** Placements one replica runs at once. */
const PLACEMENT_LANES = 16;

function freeSlots(ctx: SchedulerContext): number {
  let free = 0;
  for (const { value } of ctx.runnerView.values()) if (value.state === "active") free += Math.max(0, value.capacityTotal - value.capacityUsed);
  return free;
}

/**
 * Serialises placement passes within one replica and coalesces requests made
 * while a pass runs into one more pass. Replicas race safely through CAS.
 */
export function createPlacer(ctx: Omit<SchedulerContext, "requestPlacement">): () => void {
  let running = false;
  let again = false;
  const full = ctx as SchedulerContext;
  // Oldest first: sessions are taken in order, several at a time only while
  // there are at least as many free slots as sessions in flight, so a younger
  // session never takes the last slot from an older one.
  const pass = async () => {
    const queue = queuedOldestFirst(full);
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < queue.length; i = next++) {
        const s = queue[i];
        if (s) await placeOne(full, s, i);
      }
    };
    const lanes = Math.max(1, Math.min(PLACEMENT_LANES, freeSlots(full), queue.length));
    await Promise.all(Array.from({ length: lanes }, worker));
  };
  const request = () => {
    if (running) {
      again = true;
      return;
    }
    running = true;
    void (async () => {
      try {
        do {
          again = false;
          await pass();
        } while (again);
      } catch (err) {
        ctx.log.error({ err }, "placement pass failed");
      } finally {
        running = false;
      }
    })();
  };
  return request;
}
