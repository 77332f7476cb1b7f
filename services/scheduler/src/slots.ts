import { DispatchCommand, runnerKey, Subjects, type Session } from "@paddock/contracts";
import { encodeJson } from "@paddock/bus";
import type { SchedulerContext } from "./context.ts";
import { CasConflictError } from "./store.ts";

const MAX_CAS_ATTEMPTS = 20;

/**
 * Takes one slot of a runner's capacity by compare-and-set on its record, so
 * two scheduler replicas can never both fill the last slot.
 */
export async function reserveSlot(ctx: SchedulerContext, poolId: string, runnerId: string): Promise<number | undefined> {
  const key = runnerKey(poolId, runnerId);
  for (let i = 0; i < MAX_CAS_ATTEMPTS; i++) {
    const current = await ctx.runners.get(key);
    if (!current) return undefined;
    const r = current.value;
    if (r.state !== "active" || r.capacityUsed >= r.capacityTotal) return undefined;
    try {
      const written = await ctx.runners.update(key, { ...r, capacityUsed: r.capacityUsed + 1 }, current.revision);
      ctx.runnerView.apply(key, written);
      return r.generation;
    } catch (err) {
      if (!(err instanceof CasConflictError)) throw err;
    }
  }
  return undefined;
}

/** Gives a slot back (never below zero). */
export async function releaseSlot(ctx: SchedulerContext, poolId: string | undefined, runnerId: string | undefined): Promise<void> {
  if (!poolId || !runnerId) return;
  const written = await ctx.runners.mutate(runnerKey(poolId, runnerId), (r) =>
    r.capacityUsed > 0 ? { ...r, capacityUsed: r.capacityUsed - 1 } : undefined,
  );
  if (written) ctx.runnerView.apply(runnerKey(poolId, runnerId), written);
}

/** Sends a command to the runner a session is placed on. */
export async function dispatch(ctx: SchedulerContext, s: Session, type: "start" | "destroy", runnerGeneration: number): Promise<void> {
  if (!s.poolId || !s.runnerId) return;
  const base = {
    sessionId: s.id,
    workspaceId: s.workspaceId,
    runnerGeneration,
    placementGeneration: s.placementGeneration,
  };
  const cmd: DispatchCommand =
    type === "start" ? { type, ...base, spec: s.spec, mode: s.mode, trigger: "initial" } : { type, ...base };
  // The msg id makes a retried publish (after a timeout) land once.
  await ctx.js.publish(Subjects.dispatch(s.poolId, s.runnerId), encodeJson(DispatchCommand, cmd), {
    msgID: `${type}.${s.id}.${s.placementGeneration}.${runnerGeneration}`,
  });
}
