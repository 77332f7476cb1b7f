/**
 * The TERM writer's knobs: the coalescing clock and the writer's options
 * (term-writer.ts re-exports them). Its chunk bound is TERM_CHUNK_MAX_BYTES
 * (contracts): large enough that one fenced publish in flight per app
 * carries full-speed output (decision 0065).
 */
import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import type { TerminalSize } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { RunnerMetrics } from "../metrics.ts";

/**
 * How long output that keeps arriving is held to fill a chunk (see append).
 * A few ms: long enough that a fast producer fills its chunks (so the
 * per-chunk costs and the per-subject chunk count bound hold in bytes), short
 * enough not to be seen; output that answers input is never held.
 */
export const DEFAULT_COALESCE_MS = 4;

/** The writer's clock and timer: injectable so tests decide when a window ends. */
export interface CoalesceClock {
  now(): number;
  /** Calls fn once after ms unless the returned cancel is called first. */
  after(ms: number, fn: () => void): () => void;
}

export const realClock: CoalesceClock = {
  now: () => performance.now(),
  after: (ms, fn) => {
    const timer = setTimeout(fn, ms);
    return () => clearTimeout(timer);
  },
};

/** How app output becomes the terminal log and its screen checkpoints. */
export interface TerminalSettings {
  /** TermWriter's coalescing window. */
  coalesceMs: number;
  /** Screen checkpoints; undefined writes none. */
  screen: { quietMs: number; intervalMs: number } | undefined;
}

export const defaultTerminalSettings: TerminalSettings = { coalesceMs: DEFAULT_COALESCE_MS, screen: { quietMs: 200, intervalMs: 5_000 } };

export interface TermWriterOptions {
  js: JetStreamClient;
  jsm: JetStreamManager;
  /** This runner: its logs live under its own pool/runner subject tokens. */
  poolId: string;
  runnerId: string;
  sessionId: string;
  app: string;
  placementGeneration: number;
  /**
   * Asks the record whether this placement is still the session's current
   * one. Called only when another runner's subject holds the app's last
   * chunk (a runner may not read other runners' logs); throws when the
   * answer cannot be had, and the chunk is retried.
   */
  isCurrentPlacement: () => Promise<boolean>;
  metrics: Pick<RunnerMetrics, "termFenced" | "termRetries">;
  log: Logger;
  maxChunkBytes?: number;
  /** First retry delay after a non-fencing publish error; doubles up to maxRetryDelayMs. */
  retryDelayMs?: number;
  maxRetryDelayMs?: number;
  publishTimeoutMs?: number;
  /** Pending bytes above which the producer is asked to pause (PTY backpressure). */
  highWaterBytes?: number;
  /** Called with true when pending output crosses highWaterBytes, false once it drained below half. */
  onPressure?: (paused: boolean) => void;
  /** The coalescing window (DEFAULT_COALESCE_MS); 0 publishes whatever is there as soon as nothing is in flight. */
  coalesceMs?: number;
  clock?: CoalesceClock;
  /** Told about every committed data chunk, in log order, with its TERM sequence (screen checkpoints). */
  onCommitted?: (seq: number, body: Uint8Array) => void;
  /** Told about every committed resize marker, in the same order as onCommitted. */
  onResized?: (seq: number, size: TerminalSize) => void;
}
