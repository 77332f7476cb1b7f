import { z } from "zod";
import { EpochMs, Generation, Id } from "./ids.ts";
import { RunTrigger, Usage } from "./audit.ts";
import { BootEnvironment } from "./environment.ts";
import { AppRun, Checkpoint, PortableSpec, SealKey, SessionMode, SessionStateSchema } from "./session.ts";

export const RunnerState = { active: "active", draining: "draining", cordoned: "cordoned", lost: "lost" } as const;
export type RunnerState = (typeof RunnerState)[keyof typeof RunnerState];
export const RunnerStateSchema = z.enum(RunnerState);
/** The states an operator may set (drain, cordon, uncordon); `lost` is the scheduler's verdict only. */
export const SettableRunnerState = RunnerStateSchema.exclude([RunnerState.lost]);
export type SettableRunnerState = z.infer<typeof SettableRunnerState>;

/** Resources a runner offers one session (millicores, bytes). */
export const RunnerResources = z
  .object({
    cpuMillis: z.number().int().nonnegative(),
    memoryBytes: z.number().int().nonnegative(),
    diskBytes: z.number().int().nonnegative(),
  })
  .strict();
export type RunnerResources = z.infer<typeof RunnerResources>;

/** One compare-and-set that took `count` slots of a runner at `at`. */
export const SlotReservation = z.object({ at: EpochMs, count: z.number().int().positive() }).strict();
export type SlotReservation = z.infer<typeof SlotReservation>;

/** Reservations a runner record lists at most (older ones are merged into the oldest kept). */
export const MAX_RESERVATIONS = 8;

/** The runner record stored in KV `runners` under `<pool>.<runner>`; written by schedulers only. */
export const Runner = z
  .object({
    id: Id,
    poolId: Id,
    state: RunnerStateSchema,
    /** The authoritative registration generation; a claim must exceed it. */
    generation: Generation,
    /** Slots held by sessions placed here (creating, running, suspended_warm). */
    capacityUsed: z.number().int().nonnegative(),
    capacityTotal: z.number().int().nonnegative(),
    capabilities: z.array(z.string().min(1).max(64)).max(64),
    /** What one session may use on this runner at most; placement compares requirements against it. */
    resources: RunnerResources.optional(),
    registeredAt: EpochMs,
    lastSeenAt: EpochMs,
    /**
     * Slots reserved here recently (within the scheduler's capacity-repair
     * window), oldest first: a reservation's sessions are written just after
     * it, so until then slot-count repair counts them as taken.
     */
    reservations: z.array(SlotReservation).max(MAX_RESERVATIONS).optional(),
    /** Why the runner is lost (lease expired), when it is. */
    lostReason: z.string().max(256).optional(),
    /** An operator's state (draining, cordoned) the runner had when it was lost: it has it again when it registers. */
    stateBeforeLost: z.enum(["draining", "cordoned"]).optional(),
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
export type HeldSession = z.infer<typeof HeldSession>;

/** Request on `paddock.fleet.v1.register.<pool>.<runner>` (the subject must name the body's runner). */
export const RegisterRunnerRequest = z
  .object({
    runnerId: Id,
    poolId: Id,
    /** The generation this runner claims; must be greater than the stored one. */
    generation: Generation.min(1),
    capacityTotal: z.number().int().nonnegative().max(100_000),
    capabilities: z.array(z.string().min(1).max(64)).max(64),
    resources: RunnerResources.optional(),
    sessions: z.array(HeldSession).max(100_000),
  })
  .strict();
export type RegisterRunnerRequest = z.infer<typeof RegisterRunnerRequest>;

/** A held placement the registration kept, with the state its record shows (the scheduler's view). */
export const KeptSession = z
  .object({ sessionId: Id, placementGeneration: Generation, state: SessionStateSchema })
  .strict();
export type KeptSession = z.infer<typeof KeptSession>;

export const RegisterRunnerReply = z
  .object({
    /** False: the claim was stale — this runner is fenced and must claim again above `generation`. */
    accepted: z.boolean(),
    /** The generation now authoritative for this runner. */
    generation: Generation,
    /** Sessions the runner holds that no live record places there: destroy them. */
    destroy: z.array(HeldSession),
    /**
     * The held placements kept, with their records' states: where the runner's
     * sandbox is elsewhere (a start, suspend or resume whose fact the new
     * generation's fence will drop), the runner states it again.
     */
    kept: z.array(KeptSession).max(100_000).optional(),
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
  z
    .object({
      type: z.literal("running"),
      ...factBase,
      /**
       * The environment setup the sandbox was booted with (the start's
       * `environment.setupHash`); absent without an environment or when a
       * checkpoint was restored (its workspace holds the setup it had).
       */
      setupHash: z.string().max(128).optional(),
    })
    .strict(),
  z
    .object({
      type: z.literal("exited"),
      ...factBase,
      exitCode: z.number().int().nullable(),
      /** Signal name when the process was killed by one. */
      signal: z.string().max(32).optional(),
      /** What this placement generation used, measured by the runner. */
      usage: Usage.optional(),
    })
    .strict(),
  z.object({ type: z.literal("failed"), ...factBase, reason: z.string().max(512) }).strict(),
  z.object({ type: z.literal("destroyed"), ...factBase, usage: Usage.optional() }).strict(),
  /** Warm: processes stopped in place. Cold: workspace checkpointed, sandbox removed. */
  z
    .object({
      type: z.literal("suspended"),
      ...factBase,
      warm: z.boolean(),
      checkpoint: Checkpoint.optional(),
      /** The key the cold checkpoint was sealed with (goes to the scheduler's key store, never the record). */
      sealKey: SealKey.optional(),
      usage: Usage.optional(),
    })
    .strict(),
  /** A warm-suspended sandbox continues. */
  z.object({ type: z.literal("resumed"), ...factBase }).strict(),
  /** A checkpoint of a running sandbox (snapshot or periodic), answering `checkpoint`. */
  z.object({ type: z.literal("checkpointed"), ...factBase, requestId: Id, checkpoint: Checkpoint, sealKey: SealKey }).strict(),
  /** The runner could not do what a command asked (suspend, resume, checkpoint); the session keeps its state. */
  z.object({ type: z.literal("refused"), ...factBase, requestId: Id, reason: z.string().max(512) }).strict(),
  /** One app's generation started, completed or failed; the session's state is untouched. */
  z
    .object({
      type: z.literal("app"),
      ...factBase,
      app: Id,
      run: AppRun,
      /** Milliseconds the generation ran, once it ended. */
      durationMs: z.number().int().nonnegative().optional(),
      /** The restart_app command that started this generation (it settles that pending request). */
      requestId: Id.optional(),
    })
    .strict(),
  /** A snapshot of an environment's setup, built for setupHash. */
  z
    .object({
      type: z.literal("env_snapshot"),
      ...factBase,
      environmentId: Id,
      setupHash: z.string(),
      checkpoint: Checkpoint,
      sealKey: SealKey,
    })
    .strict(),
]);
export type RunnerFact = z.infer<typeof RunnerFact>;

/**
 * The checkpoints (refs) a new incremental checkpoint may reuse chunks of:
 * ones the session's record (or its environment's) names when the command
 * goes out, so the collector keeps their chunks until a newer checkpoint
 * names them in turn (docs/decisions/0062).
 */
export const CheckpointBase = z.array(z.string().min(1).max(512)).max(2);

const commandBase = {
  sessionId: Id,
  workspaceId: Id,
  runnerGeneration: Generation,
  placementGeneration: Generation,
};

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
      /** initial: a fresh sandbox; resume: restore `restore` first (cold resume). */
      trigger: RunTrigger.extract(["initial", "resume"]),
      restore: Checkpoint.optional(),
      /** The key `restore` was sealed with. A secret: never logged. */
      restoreKey: SealKey.optional(),
      environment: BootEnvironment.optional(),
      // No service token here: DISPATCH is a stream others may read. The runner asks for it
      // over its own inbox (FleetRpc.sessionSecrets with `token`).
      /**
       * The last generation the record shows for each app (a cold resume or a
       * takeover): the placement numbers its apps' generations on from these.
       */
      appGenerations: z.record(Id, z.number().int().nonnegative()).optional(),
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
  /** Warm: stop the processes in place (slot kept). Cold: checkpoint, then remove the sandbox. */
  z.object({ type: z.literal("suspend"), ...commandBase, requestId: Id, warm: z.boolean(), base: CheckpointBase.optional() }).strict(),
  /** Continue a warm-suspended sandbox. */
  z.object({ type: z.literal("resume"), ...commandBase, requestId: Id }).strict(),
  /** Checkpoint the workspace without stopping anything. */
  z.object({ type: z.literal("checkpoint"), ...commandBase, requestId: Id, base: CheckpointBase.optional() }).strict(),
  /** Start the next generation of one app. */
  z.object({ type: z.literal("restart_app"), ...commandBase, requestId: Id, app: Id, trigger: RunTrigger }).strict(),
]);
export type DispatchCommand = z.infer<typeof DispatchCommand>;
