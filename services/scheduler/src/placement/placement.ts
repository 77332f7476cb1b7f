import { environmentKey, runnerKey, sessionKey, type Requirements, type Runner, type Session } from "@paddock/contracts";
import { overridesImage } from "../state/layering.ts";
import type { SchedulerContext } from "../context.ts";
import { SCHEDULER_ACTOR, transition, writeSession } from "../state/writes.ts";
import { dispatchStart, releaseSlot, reserveSlots } from "../fleet/slots.ts";
import { CasConflictError } from "../state/store.ts";
import { mintSessionToken } from "../fleet/tokens.ts";

/** Whether a runner offers what the session requires: every capability, and at least the minimum resources. */
export function satisfies(runner: Runner, req: Requirements | undefined): boolean {
  if (!req) return true;
  if (!req.capabilities.every((c) => runner.capabilities.includes(c))) return false;
  const r = runner.resources;
  if (!r) return req.minCpuMillis === 0 && req.minMemoryBytes === 0 && req.minDiskBytes === 0;
  return r.cpuMillis >= req.minCpuMillis && r.memoryBytes >= req.minMemoryBytes && r.diskBytes >= req.minDiskBytes;
}

/**
 * Tuning of one placement pass. Every write of a pass is in flight at once;
 * a runner's share of a pass is reserved by one compare-and-set on its
 * record, so a larger share means fewer runner writes and less spreading.
 */
export interface PlacementLimits {
  /** Sessions one pass places at most. */
  passSessions: number;
  /** Sessions one runner receives in one pass at most. */
  perRunner: number;
}

export const DEFAULT_PLACEMENT_LIMITS: PlacementLimits = { passSessions: 256, perRunner: 8 };

/** One runner's share of a pass: reserved together, placed together. */
interface Share {
  runner: Runner;
  sessions: Session[];
}

function queuedOldestFirst(ctx: SchedulerContext, held: ReadonlySet<string>): Session[] {
  return [...ctx.sessionIndex.queued()].filter((s) => !held.has(sessionKey(s.workspaceId, s.id))).sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** A fresh boot that would run its environment's setup (no valid snapshot, image not overridden). */
function buildsSetup(ctx: SchedulerContext, s: Session): boolean {
  if (s.environmentId === undefined || s.placementGeneration > 0) return false;
  const env = ctx.envs.view.get(environmentKey(s.workspaceId, s.environmentId))?.value;
  if (!env?.setup || overridesImage(env, s.spec)) return false;
  return !(env.snapshot && env.snapshotHash === env.setupHash && env.setupHash === s.setupHash);
}

function buildKey(s: Session): string {
  return `${s.workspaceId}.${s.environmentId ?? ""}.${s.setupHash ?? ""}`;
}

/** Setup builds in progress: first placements of an environment's sessions that are still creating. */
function buildsInProgress(ctx: SchedulerContext): Set<string> {
  const builds = new Set<string>();
  for (const { value: t } of ctx.sessionView.values()) {
    if (t.state === "creating" && t.environmentId !== undefined && t.placementGeneration === 1) builds.add(buildKey(t));
  }
  return builds;
}

/** Sessions with the same pool and requirements can go to the same runners. */
function classOf(s: Session): string {
  const r = s.requirements;
  return `${s.poolId ?? ""}|${r ? `${r.capabilities.join(",")}|${r.minCpuMillis}|${r.minMemoryBytes}|${r.minDiskBytes}` : ""}`;
}

/**
 * Assigns queued sessions to runners, oldest first, against the free slots
 * the runners view shows (counted down as the pass assigns them, so a younger
 * session never takes the last slot an older one was given). A runner is
 * filled up to `perRunner` before the next one is opened; the next is the
 * eligible runner with the most free slots (id breaks ties), which spreads
 * load. Setup runs once per setupHash: while one session of an environment
 * is building it, the others wait queued and then boot from its snapshot.
 */
export function planPass(ctx: SchedulerContext, queue: Session[], limits: PlacementLimits): Share[] {
  const active: Runner[] = [];
  const byKey = new Map<string, Runner>();
  const free = new Map<string, number>();
  for (const { value } of ctx.runnerView.values()) {
    const room = value.capacityTotal - value.capacityUsed;
    if (value.state !== "active" || room <= 0) continue;
    active.push(value);
    byKey.set(runnerKey(value.poolId, value.id), value);
    free.set(runnerKey(value.poolId, value.id), room);
  }
  const shares = new Map<string, Share>();
  const open = new Map<string, string>();
  let builds: Set<string> | undefined;
  let planned = 0;
  const hasRoom = (key: string) => (free.get(key) ?? 0) > 0 && (shares.get(key)?.sessions.length ?? 0) < limits.perRunner;
  const pick = (s: Session): string | undefined => {
    let best: Runner | undefined;
    let bestFree = 0;
    for (const r of active) {
      const key = runnerKey(r.poolId, r.id);
      if (!hasRoom(key) || (s.poolId !== undefined && r.poolId !== s.poolId) || !satisfies(r, s.requirements)) continue;
      const f = free.get(key) ?? 0;
      if (!best || f > bestFree || (f === bestFree && r.id < best.id)) {
        best = r;
        bestFree = f;
      }
    }
    return best ? runnerKey(best.poolId, best.id) : undefined;
  };
  for (const s of queue) {
    if (planned >= limits.passSessions || active.length === 0) break;
    const builder = buildsSetup(ctx, s);
    if (builder) {
      builds ??= buildsInProgress(ctx);
      if (builds.has(buildKey(s))) continue;
    }
    const cls = classOf(s);
    const current = open.get(cls);
    const key = current !== undefined && hasRoom(current) ? current : pick(s);
    if (key === undefined) continue;
    open.set(cls, key);
    const runner = byKey.get(key);
    if (!runner) continue;
    const share = shares.get(key) ?? { runner, sessions: [] };
    share.sessions.push(s);
    shares.set(key, share);
    free.set(key, (free.get(key) ?? 0) - 1);
    // Others of its environment wait for this one's build.
    if (builder) builds?.add(buildKey(s));
    planned++;
  }
  return [...shares.values()];
}

/** A placed session with its start's token (stored, or being stored); or why it was not placed. */
type Placed = { session: Session; token: Promise<string> } | "lost" | "failed";

/** Moves one queued session to creating on the runner (CAS on the revision the view holds). */
async function placeSession(ctx: SchedulerContext, queued: Session, runner: Runner): Promise<Placed> {
  // The view's revision is the CAS precondition: if it is stale the write loses and the slot goes back.
  const current = ctx.sessionView.get(sessionKey(queued.workspaceId, queued.id));
  if (!current || current.value.state !== "queued") return "lost";
  const next = transition(ctx, current.value, "creating", "place", SCHEDULER_ACTOR, {
    poolId: runner.poolId,
    runnerId: runner.id,
    placementGeneration: current.value.placementGeneration + 1,
  });
  // The start's service token is stored while the placement is written rather
  // than after it: one round trip less on every create's path to running. The
  // token is derived from (session, placement generation), so a replica that
  // wins this placement stores the same record; one left by a lost race names
  // a generation never placed, whose token nobody was given.
  const token = mintSessionToken(ctx, next);
  token.catch(() => undefined);
  try {
    await writeSession(ctx, current, next);
    return { session: next, token };
  } catch (err) {
    if (err instanceof CasConflictError) return "lost";
    ctx.log.warn({ err, sessionId: queued.id }, "placement write failed");
    return "failed";
  }
}

/**
 * Places one runner's share: reserve its slots in one CAS on the runner,
 * move each session to creating with the next placement generation (one CAS
 * each, all in flight together), give back the slots of the ones that lost
 * their race, and hand the placed ones to `dispatch`.
 */
async function placeShare(ctx: SchedulerContext, share: Share, dispatch: (s: Session, runnerGeneration: number, token: Promise<string>) => void): Promise<void> {
  const { runner } = share;
  const reserved = await reserveSlots(ctx, runner.poolId, runner.id, share.sessions.length);
  if (!reserved) return;
  const outcomes = await Promise.all(share.sessions.slice(0, reserved.count).map((s) => placeSession(ctx, s, runner)));
  let unused = 0;
  for (const [i, o] of outcomes.entries()) {
    if (typeof o === "string") {
      unused++;
      continue;
    }
    ctx.metrics.placements.inc();
    ctx.metrics.placementSeconds.observe(Math.max(0, ctx.now() - (share.sessions[i]?.updatedAt ?? ctx.now())) / 1000);
    dispatch(o.session, reserved.generation, o.token);
  }
  if (unused > 0) await releaseSlot(ctx, runner.poolId, runner.id, unused);
}

/** Settles a placement begun beside a record's write: `written` says the record is stored as created. */
export type AfterWrite = (written: boolean) => void;

/** At most this many sessions are placed beside their writes at once; more go through passes. */
const MAX_PLACEMENTS_BESIDE_WRITES = 4;

export interface Placer {
  /** Asks for a placement pass soon (coalesced). */
  request(): void;
  /**
   * Begins placing a session about to be written, beside its write: on an
   * idle system (no pass running, nothing queued) the slot a pass would pick
   * is reserved while the record is created, so the create's path to the
   * runner has one round trip fewer. Undefined when it does not apply; the
   * caller then requests a pass as usual. A burst still goes through
   * batched passes, whose one reservation serves several sessions, and so
   * does a session that would build its environment's setup.
   */
  placeOnWrite(s: Session): AfterWrite | undefined;
  /** No new passes; resolves when the running pass and its dispatches are done. */
  stop(): Promise<void>;
}

/**
 * Serialises placement passes within one replica and coalesces requests made
 * while a pass runs into one more pass. Replicas race safely through CAS: a
 * runner's slots by CAS on its record, a session's placement by CAS on its.
 * A placed session's start is sent after its pass moves on (the session is
 * creating, no later pass takes it); one that is never sent is re-sent by
 * the sweep.
 */
export function createPlacer(ctx: Omit<SchedulerContext, "requestPlacement" | "placeOnWrite">, limits: PlacementLimits = DEFAULT_PLACEMENT_LIMITS): Placer {
  let running: Promise<void> | undefined;
  let again = false;
  let stopped = false;
  const full = ctx as SchedulerContext;
  const inFlight = new Set<Promise<void>>();
  const track = (p: Promise<void>) => {
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  };
  // Sessions being placed beside their writes: passes leave them alone.
  const eager = new Set<string>();
  const dispatch = (s: Session, runnerGeneration: number, token: Promise<string>) => {
    track(dispatchStart(full, s, runnerGeneration, token).catch((err: unknown) => ctx.log.warn({ err, sessionId: s.id }, "start not sent; the sweep re-sends it")));
  };
  const pass = async () => {
    if (ctx.sessionIndex.queuedCount === 0) return;
    const shares = planPass(full, queuedOldestFirst(full, eager), limits);
    await Promise.all(
      shares.map((share) =>
        placeShare(full, share, dispatch).catch((err: unknown) => ctx.log.warn({ err, runnerId: share.runner.id }, "placement on runner failed")),
      ),
    );
  };
  const request = () => {
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    running = (async () => {
      try {
        do {
          again = false;
          await pass();
        } while (again && !stopped);
      } catch (err) {
        ctx.log.error({ err }, "placement pass failed");
      } finally {
        running = undefined;
      }
    })();
  };
  const placeOnWrite = (s: Session): AfterWrite | undefined => {
    if (stopped || running || eager.size >= MAX_PLACEMENTS_BESIDE_WRITES || ctx.sessionIndex.queuedCount > 0) return undefined;
    // A setup build is placed by a pass, which runs one build per setupHash at a time.
    if (buildsSetup(full, s)) return undefined;
    const [share] = planPass(full, [s], { passSessions: 1, perRunner: 1 });
    if (!share) return undefined;
    const key = sessionKey(s.workspaceId, s.id);
    eager.add(key);
    const { runner } = share;
    const reservation = reserveSlots(full, runner.poolId, runner.id, 1).catch((err: unknown) => {
      ctx.log.warn({ err, runnerId: runner.id }, "slot reservation failed");
      return undefined;
    });
    return (written) => {
      track(
        (async () => {
          const reserved = await reservation;
          if (!reserved) return;
          // A write that did not create the record (failed, or found one already there) leaves it to a pass.
          const placed = written ? await placeSession(full, s, runner) : "lost";
          if (typeof placed === "string") {
            await releaseSlot(full, runner.poolId, runner.id, 1);
            return;
          }
          ctx.metrics.placements.inc();
          ctx.metrics.placementSeconds.observe(Math.max(0, ctx.now() - s.updatedAt) / 1000);
          dispatch(placed.session, reserved.generation, placed.token);
        })()
          .catch((err: unknown) => ctx.log.warn({ err, sessionId: s.id }, "placement beside the write failed; a pass places it"))
          .finally(() => {
            eager.delete(key);
            // Whatever this did not place (and anything queued meanwhile) goes to a pass.
            request();
          }),
      );
    };
  };
  return {
    request,
    placeOnWrite,
    stop: async () => {
      stopped = true;
      await running;
      // A placement beside a write that settles here may still hand a start to dispatch.
      while (inFlight.size > 0) await Promise.all([...inFlight]);
    },
  };
}
