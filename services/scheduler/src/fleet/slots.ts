import { DispatchCommand, MAX_RESERVATIONS, runnerKey, Subjects, type Runner, type Session, type SlotReservation } from "@paddock/contracts";
import { mintSessionToken } from "./tokens.ts";
import { encoderOf } from "@paddock/bus";
import type { SchedulerContext } from "../context.ts";
import { CasConflictError } from "../state/store.ts";

const MAX_CAS_ATTEMPTS = 20;

/**
 * Takes up to `wanted` slots of a runner's capacity by one compare-and-set on
 * its record, so several scheduler replicas can never fill it past its
 * capacity; answers the runner generation and how many were taken (fewer when
 * fewer are free), or undefined when none could be.
 */
export async function reserveSlots(
  ctx: SchedulerContext,
  poolId: string,
  runnerId: string,
  wanted: number,
): Promise<{ generation: number; count: number } | undefined> {
  const key = runnerKey(poolId, runnerId);
  for (let i = 0; i < MAX_CAS_ATTEMPTS; i++) {
    // First try with the view's revision (no read); after a lost race read it exactly.
    const current = i === 0 ? ctx.runnerView.get(key) : await ctx.runners.get(key);
    if (!current) return undefined;
    if (i > 0) ctx.runnerView.apply(key, current);
    const r = current.value;
    const count = Math.min(wanted, r.capacityTotal - r.capacityUsed);
    if (r.state !== "active" || count <= 0) return undefined;
    try {
      const reservations = withReservation(r.reservations, ctx.now(), count, ctx.config.capacityRepairQuietMs);
      const written = await ctx.runners.update(key, { ...r, capacityUsed: r.capacityUsed + count, reservations }, current.revision);
      ctx.runnerView.apply(key, written);
      return { generation: r.generation, count };
    } catch (err) {
      if (!(err instanceof CasConflictError)) throw err;
    }
  }
  return undefined;
}

/**
 * The reservation list after taking `count` slots at `at`: entries that left
 * the repair window dropped, the oldest merged into the next past the cap
 * (keeping the later time, so the merged slots count as taken for longer).
 */
export function withReservation(list: readonly SlotReservation[] | undefined, at: number, count: number, windowMs: number): SlotReservation[] {
  let kept = [...(list ?? []).filter((r) => r.at > at - windowMs), { at, count }];
  while (kept.length > MAX_RESERVATIONS) {
    const [first, second, ...rest] = kept;
    if (!first || !second) break;
    kept = [{ at: second.at, count: first.count + second.count }, ...rest];
  }
  return kept;
}

/** Slots reserved within `windowMs` before `now`: their sessions may not be written (or seen) yet. */
export function recentlyReserved(r: Runner, now: number, windowMs: number): number {
  return (r.reservations ?? []).reduce((n, x) => (x.at > now - windowMs ? n + x.count : n), 0);
}

/** Gives `count` slots back (never below zero). */
export async function releaseSlot(ctx: SchedulerContext, poolId: string | undefined, runnerId: string | undefined, count = 1): Promise<void> {
  if (!poolId || !runnerId || count <= 0) return;
  const written = await ctx.runners.mutate(runnerKey(poolId, runnerId), (r) =>
    r.capacityUsed > 0 ? { ...r, capacityUsed: Math.max(0, r.capacityUsed - count) } : undefined,
  );
  if (written) ctx.runnerView.apply(runnerKey(poolId, runnerId), written);
}

type CommandBody = DistributiveOmit<DispatchCommand, "sessionId" | "workspaceId" | "runnerGeneration" | "placementGeneration">;
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** The runner generation of the runner a session is placed on, read exactly (not from the view). */
export async function runnerGenerationOf(ctx: SchedulerContext, s: Session): Promise<number | undefined> {
  if (!s.poolId || !s.runnerId) return undefined;
  return (await ctx.runners.get(runnerKey(s.poolId, s.runnerId)))?.value.generation;
}

/**
 * Sends a command to the runner a session is placed on, stamped with the
 * generations that fence it. The msg id makes a retried publish land once.
 */
export async function sendCommand(ctx: SchedulerContext, s: Session, body: CommandBody, runnerGeneration?: number): Promise<void> {
  if (!s.poolId || !s.runnerId) return;
  const generation = runnerGeneration ?? (await runnerGenerationOf(ctx, s));
  if (generation === undefined) return;
  const base = needsBase(body) ? await checkpointBase(ctx, s) : [];
  const cmd = {
    ...body,
    ...(base.length > 0 ? { base } : {}),
    sessionId: s.id,
    workspaceId: s.workspaceId,
    runnerGeneration: generation,
    placementGeneration: s.placementGeneration,
  } as DispatchCommand;
  const discriminator = "requestId" in body ? body.requestId : "";
  await ctx.js.publish(Subjects.dispatch(s.poolId, s.runnerId), encoderOf(ctx.nc)(DispatchCommand, cmd), {
    msgID: `${body.type}.${s.id}.${s.placementGeneration}.${generation}.${discriminator}`,
  });
}

/** A command that stores a checkpoint: a checkpoint, or a cold suspend. */
function needsBase(body: CommandBody): boolean {
  return body.type === "checkpoint" || (body.type === "suspend" && !body.warm);
}

/**
 * What the runner may build the checkpoint on (docs/decisions/0062): the
 * record's checkpoint and its environment's snapshot, both kept alive by the
 * collector while a record names them.
 */
async function checkpointBase(ctx: SchedulerContext, s: Session): Promise<string[]> {
  const refs = s.checkpoint ? [s.checkpoint.ref] : [];
  if (s.environmentId === undefined) return refs;
  const env = await ctx.envs.find(s.workspaceId, s.environmentId).catch(() => undefined);
  if (env?.value.snapshot) refs.push(env.value.snapshot.ref);
  return refs;
}

/**
 * Starts a placed session: a fresh sandbox, or a cold resume restoring its
 * checkpoint. `token` is the placement's service token when its record is
 * already being stored; it is stored here otherwise.
 */
export async function dispatchStart(ctx: SchedulerContext, s: Session, runnerGeneration: number, token?: Promise<string>): Promise<void> {
  const resume = s.placementGeneration > 1 && s.checkpoint !== undefined;
  // The token's record is stored before the start goes out; the runner asks for the token itself.
  const [, boot, restoreKey] = await Promise.all([
    token ?? mintSessionToken(ctx, s),
    ctx.bootEnvironment(s),
    resume && s.checkpoint ? ctx.sealKeys.get(s.checkpoint.ref) : Promise.resolve(undefined),
  ]);
  await sendCommand(
    ctx,
    s,
    {
      type: "start",
      spec: s.spec,
      mode: s.mode,
      trigger: resume ? "resume" : "initial",
      // Without its key the restore fails on the runner and the boot is reported failed.
      ...(resume && s.checkpoint ? { restore: s.checkpoint, ...(restoreKey !== undefined ? { restoreKey } : {}) } : {}),
      ...boot,
      ...appGenerationsOf(s),
    },
    runnerGeneration,
  );
}

/**
 * The generation each app last had, as the record shows it: a new placement
 * (cold resume, takeover) numbers its apps on from there, so an app's
 * generations keep increasing across placements.
 */
function appGenerationsOf(s: Session): { appGenerations?: Record<string, number> } {
  if (!s.apps) return {};
  const entries = Object.entries(s.apps).map(([app, run]) => [app, run.generation] as const);
  return entries.length > 0 ? { appGenerations: Object.fromEntries(entries) } : {};
}

export async function dispatchDestroy(ctx: SchedulerContext, s: Session): Promise<void> {
  await sendCommand(ctx, s, { type: "destroy" });
}
