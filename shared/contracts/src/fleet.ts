import { z } from "zod";
import { EpochMs, Generation, Id } from "./ids.ts";
import { PortableSpec, SessionMode } from "./session.ts";

export const RunnerState = { active: "active", draining: "draining", cordoned: "cordoned", lost: "lost" } as const;
export type RunnerState = (typeof RunnerState)[keyof typeof RunnerState];

/** The runner record stored in KV `runners` under `<pool>.<runner>`; written by schedulers only. */
export const Runner = z
  .object({
    id: Id,
    poolId: Id,
    state: z.enum(["active", "draining", "cordoned", "lost"]),
    /** The authoritative registration generation; a claim must exceed it. */
    generation: Generation,
    /** Slots held by sessions placed here (creating, running, suspended_warm). */
    capacityUsed: z.number().int().nonnegative(),
    capacityTotal: z.number().int().nonnegative(),
    capabilities: z.array(z.string().min(1).max(64)).max(64),
    registeredAt: EpochMs,
    lastSeenAt: EpochMs,
  })
  .strict();
export type Runner = z.infer<typeof Runner>;

export function runnerKey(poolId: string, runnerId: string): string {
  return `${poolId}.${runnerId}`;
}

/** What a runner holds when it (re)registers. */
export const HeldSession = z
  .object({ sessionId: Id, workspaceId: Id, placementGeneration: Generation })
  .strict();

/** Request on `paddock.fleet.v1.register`. */
export const RegisterRunnerRequest = z
  .object({
    runnerId: Id,
    poolId: Id,
    /** The generation this runner claims; must be greater than the stored one. */
    generation: Generation.min(1),
    capacityTotal: z.number().int().nonnegative().max(100_000),
    capabilities: z.array(z.string().min(1).max(64)).max(64),
    sessions: z.array(HeldSession).max(100_000),
  })
  .strict();
export type RegisterRunnerRequest = z.infer<typeof RegisterRunnerRequest>;

export const RegisterRunnerReply = z
  .object({
    accepted: z.boolean(),
    /** The generation now authoritative for this runner. */
    generation: Generation,
    /** Sessions the runner holds that no live record places there: destroy them. */
    destroy: z.array(HeldSession),
  })
  .strict();
export type RegisterRunnerReply = z.infer<typeof RegisterRunnerReply>;

/** The liveness lease a runner renews in KV `runner-leases` under `<pool>.<runner>`. */
export const RunnerLease = z
  .object({ runnerId: Id, poolId: Id, generation: Generation, renewedAt: EpochMs })
  .strict();
export type RunnerLease = z.infer<typeof RunnerLease>;

const factBase = {
  runnerId: Id,
  poolId: Id,
  runnerGeneration: Generation,
  sessionId: Id,
  workspaceId: Id,
  placementGeneration: Generation,
  at: EpochMs,
};

/**
 * A runner's report about one session it holds, on RUNNER
 * `paddock.runner.<pool>.<runner>.events`. Fenced by the scheduler: applied
 * only when runner and placement generations match the record.
 */
export const RunnerFact = z.discriminatedUnion("type", [
  z.object({ type: z.literal("running"), ...factBase }).strict(),
  z
    .object({
      type: z.literal("exited"),
      ...factBase,
      exitCode: z.number().int().nullable(),
      /** Signal name when the process was killed by one. */
      signal: z.string().max(32).optional(),
    })
    .strict(),
  z.object({ type: z.literal("failed"), ...factBase, reason: z.string().max(512) }).strict(),
  z.object({ type: z.literal("destroyed"), ...factBase }).strict(),
]);
export type RunnerFact = z.infer<typeof RunnerFact>;

/** A scheduler command to one runner, on DISPATCH `paddock.dispatch.<pool>.<runner>`. */
export const DispatchCommand = z.discriminatedUnion("type", [
  z
    .object({
      type: z.literal("start"),
      sessionId: Id,
      workspaceId: Id,
      runnerGeneration: Generation,
      placementGeneration: Generation,
      spec: PortableSpec,
      mode: SessionMode,
    })
    .strict(),
  z
    .object({
      type: z.literal("destroy"),
      sessionId: Id,
      workspaceId: Id,
      runnerGeneration: Generation,
      placementGeneration: Generation,
    })
    .strict(),
]);
export type DispatchCommand = z.infer<typeof DispatchCommand>;
