import { z } from "zod";
import { TERM_CHUNK_MAX_BYTES } from "@paddock/contracts";
import { commonConfig, commonEnv, parseEnv } from "@paddock/config";

const ms = z.coerce.number().int().positive();

const SchedulerEnv = z.object({
  ...commonEnv,
  /** How often queued sessions are retried for placement and sweeps run. */
  PADDOCK_SCHEDULER_TICK_MS: ms.default(1_000),
  /** A creating session whose start was not acknowledged is re-dispatched after this. */
  PADDOCK_REDISPATCH_AFTER_MS: ms.default(5_000),
  /** A session still queued after this fails: no eligible runner with capacity took it. */
  PADDOCK_QUEUED_TIMEOUT_MS: ms.default(5 * 60_000),
  /** A session still creating after this fails: its runner did not start the sandbox. */
  PADDOCK_CREATING_TIMEOUT_MS: ms.default(120_000),
  /** A suspend, warm resume or snapshot the runner has not answered after this is abandoned. */
  PADDOCK_PENDING_TIMEOUT_MS: ms.default(60_000),
  /**
   * How long a suspend/resume/snapshot request waits for the runner before
   * answering with the pending record; below the gateway's request timeout (5 s).
   */
  PADDOCK_OPERATION_WAIT_MS: ms.default(4_000),
  /** Terminal records are deleted after this. */
  PADDOCK_TERMINAL_TTL_MS: ms.default(7 * 24 * 60 * 60_000),
  /** Cold-suspended sessions are destroyed after this. */
  PADDOCK_SUSPENDED_TTL_MS: ms.default(24 * 60 * 60_000),
  /** A watch session with no attached client for this long is suspended cold. */
  PADDOCK_IDLE_MS: ms.default(10 * 60_000),
  /** Running sessions are checkpointed this often; 0 turns periodic checkpoints off. */
  PADDOCK_CHECKPOINT_INTERVAL_MS: z.coerce.number().int().nonnegative().default(10 * 60_000),
  /** How often unreferenced checkpoint objects are collected; 0 turns collection off. */
  PADDOCK_CHECKPOINT_GC_INTERVAL_MS: z.coerce.number().int().nonnegative().default(5 * 60_000),
  /**
   * Checkpoint objects younger than this are never collected: it must exceed
   * the longest a runner's checkpointed fact can take to be applied.
   */
  PADDOCK_CHECKPOINT_GC_GRACE_MS: ms.default(60 * 60_000),
  /** Records kept per workspace; at the limit the oldest reclaimable one gives way. */
  PADDOCK_MAX_SESSIONS_PER_WORKSPACE: z.coerce.number().int().positive().default(1_000),
  /**
   * Records one creator (a user, or a session's own principal for its
   * children) keeps per workspace; at the limit that creator's oldest
   * reclaimable one gives way, never another's.
   */
  PADDOCK_MAX_SESSIONS_PER_USER: z.coerce.number().int().positive().default(500),
  /** The TTL runners put on their lease (must match the runners' PADDOCK_RUNNER_LEASE_TTL_MS). */
  PADDOCK_RUNNER_LEASE_TTL_MS: ms.default(10_000),
  /** After a lease expires, how long before the runner is declared lost (Nomad-style grace). */
  PADDOCK_RUNNER_LOST_GRACE_MS: ms.default(20_000),
  /** A runner's capacity count is recomputed from its sessions only after this long without a placement on it. */
  PADDOCK_CAPACITY_REPAIR_QUIET_MS: ms.default(30_000),
  /**
   * Terminal log kept per session app, in bytes. TERM can only bound chunks
   * per subject, so this becomes a chunk count (bytes / TERM_CHUNK_MAX_BYTES);
   * runners fill chunks to that size while output keeps arriving
   * (term-writer.ts), so the count holds this many bytes of sustained output,
   * and as many bursts of interactive output (see ARCHITECTURE.md, Storage).
   * The scheduler owns TERM retention; runners may not change stream configs.
   */
  PADDOCK_TERM_MAX_BYTES_PER_APP: z.coerce.number().int().min(TERM_CHUNK_MAX_BYTES).default(10_240 * TERM_CHUNK_MAX_BYTES),
  /** How long terminal chunks (and screen checkpoints) are kept. */
  PADDOCK_TERM_MAX_AGE_MS: ms.default(7 * 24 * 60 * 60_000),
  /** Bytes of screen checkpoints kept in all (SCREENS; the oldest go first). */
  PADDOCK_SCREEN_MAX_BYTES: z.coerce.number().int().min(1024 * 1024).default(1024 * 1024 * 1024),
  /**
   * Key that derives each session's service token (HMAC of session and
   * placement generation). Every scheduler replica needs the same one.
   */
  PADDOCK_SESSION_TOKEN_SECRET: z.string().min(16).optional(),
});

export type SchedulerConfig = ReturnType<typeof loadConfig>;

export function loadConfig(env: Record<string, string | undefined>) {
  const e = parseEnv(SchedulerEnv, env);
  return {
    ...commonConfig(e),
    tickMs: e.PADDOCK_SCHEDULER_TICK_MS,
    redispatchAfterMs: e.PADDOCK_REDISPATCH_AFTER_MS,
    queuedTimeoutMs: e.PADDOCK_QUEUED_TIMEOUT_MS,
    creatingTimeoutMs: e.PADDOCK_CREATING_TIMEOUT_MS,
    pendingTimeoutMs: e.PADDOCK_PENDING_TIMEOUT_MS,
    operationWaitMs: e.PADDOCK_OPERATION_WAIT_MS,
    terminalTtlMs: e.PADDOCK_TERMINAL_TTL_MS,
    suspendedTtlMs: e.PADDOCK_SUSPENDED_TTL_MS,
    idleMs: e.PADDOCK_IDLE_MS,
    checkpointIntervalMs: e.PADDOCK_CHECKPOINT_INTERVAL_MS,
    checkpointGcIntervalMs: e.PADDOCK_CHECKPOINT_GC_INTERVAL_MS,
    checkpointGcGraceMs: e.PADDOCK_CHECKPOINT_GC_GRACE_MS,
    maxSessionsPerWorkspace: e.PADDOCK_MAX_SESSIONS_PER_WORKSPACE,
    maxSessionsPerUser: e.PADDOCK_MAX_SESSIONS_PER_USER,
    sessionTokenSecret: e.PADDOCK_SESSION_TOKEN_SECRET,
    leaseTtlMs: e.PADDOCK_RUNNER_LEASE_TTL_MS,
    termMaxMsgsPerApp: Math.ceil(e.PADDOCK_TERM_MAX_BYTES_PER_APP / TERM_CHUNK_MAX_BYTES),
    termMaxAgeMs: e.PADDOCK_TERM_MAX_AGE_MS,
    screensMaxBytes: e.PADDOCK_SCREEN_MAX_BYTES,
    lostGraceMs: e.PADDOCK_RUNNER_LOST_GRACE_MS,
    capacityRepairQuietMs: e.PADDOCK_CAPACITY_REPAIR_QUIET_MS,
  };
}
