import type { BootEnvironment, Checkpoint, SealKey } from "@paddock/contracts";
import { envSnapshotObjectName, type CheckpointStore } from "../workspace/checkpoint.ts";
import { BootError, CheckpointError } from "../errors.ts";
import type { Sandbox, ScriptOutcome } from "../sandbox/backend.ts";

export const DEFAULT_SETUP_TIMEOUT_SEC = 600;
export const DEFAULT_INIT_TIMEOUT_SEC = 60;

export interface EnvSnapshotBuilt {
  environmentId: string;
  setupHash: string;
  checkpoint: Checkpoint;
  /** The key the snapshot was sealed with: reported to the scheduler only. */
  sealKey: SealKey;
}

export interface BootOptions {
  environment: BootEnvironment;
  workspaceId: string;
  /** Setup and init run in it; snapshots are taken from and restored into its workspace. */
  sandbox: Sandbox;
  /** A cold resume already restored the whole workspace: setup (or its snapshot) is not applied again. */
  restored: boolean;
  /** Setup builds a snapshot shared by every session of the environment: no session token, no secrets. */
  setupEnv: Record<string, string>;
  initEnv: Record<string, string>;
  checkpoints: CheckpointStore;
  signal: AbortSignal;
  /** Runs once the workspace holds the environment's files (snapshot or setup), before init: the session's repositories. */
  beforeInit?: () => Promise<void>;
}

export interface BootResult {
  /** Set when setup ran and its snapshot was stored. */
  snapshot?: EnvSnapshotBuilt;
  /** Set when setup ran but its snapshot could not be stored (the session boots anyway). */
  snapshotError?: string;
}

/**
 * Prepares a fresh workspace from its environment: the setup snapshot when
 * one is valid, else setup itself (then snapshotted), then init on every
 * boot. Throws BootError with the failed fact's reason.
 */
export async function bootEnvironment(opts: BootOptions): Promise<BootResult> {
  const env = opts.environment;
  const result: BootResult = {};
  if (!opts.restored && env.snapshot) {
    try {
      await opts.checkpoints.restore(env.snapshot, env.snapshotKey, opts.sandbox.workspace, opts.sandbox.user);
      await opts.sandbox.adopt();
    } catch (err) {
      throw new BootError(`environment snapshot restore failed: ${err instanceof CheckpointError ? err.message : "unknown error"}`, { cause: err });
    }
  } else if (!opts.restored && env.setup !== undefined && env.setup !== "") {
    const timeoutSec = env.setupTimeoutSec ?? DEFAULT_SETUP_TIMEOUT_SEC;
    const outcome = await opts.sandbox.runScript({ script: env.setup, env: opts.setupEnv, timeoutMs: timeoutSec * 1000, signal: opts.signal });
    if (outcome.kind !== "ok") throw new BootError(describe("setup", outcome, timeoutSec));
    const name = envSnapshotObjectName(opts.workspaceId, env.environmentId, env.setupHash);
    try {
      const saved = await opts.checkpoints.save("env-snapshots", name, opts.sandbox.workspace, opts.sandbox.user);
      result.snapshot = { environmentId: env.environmentId, setupHash: env.setupHash, ...saved };
    } catch (err) {
      result.snapshotError = err instanceof CheckpointError ? err.message : "snapshot failed";
    }
  }
  await opts.beforeInit?.();
  if (env.init !== undefined && env.init !== "") {
    const timeoutSec = env.initTimeoutSec ?? DEFAULT_INIT_TIMEOUT_SEC;
    const outcome = await opts.sandbox.runScript({ script: env.init, env: opts.initEnv, timeoutMs: timeoutSec * 1000, signal: opts.signal });
    if (outcome.kind !== "ok") throw new BootError(describe("init", outcome, timeoutSec));
  }
  return result;
}

function describe(step: "setup" | "init", outcome: Exclude<ScriptOutcome, { kind: "ok" }>, timeoutSec: number): string {
  switch (outcome.kind) {
    case "timeout":
      return `${step} timed out after ${timeoutSec}s`;
    case "aborted":
      return `${step} aborted`;
    case "spawn_error":
      return `${step} could not start`;
    case "exit":
      return outcome.exitCode === null ? `${step} failed (signal ${outcome.signal ?? "unknown"})` : `${step} failed (exit ${outcome.exitCode})`;
  }
}
