import { headers as natsHeaders } from "@nats-io/transport-node";
import type { JetStreamClient } from "@nats-io/jetstream";
import { Headers, INITIAL_TERMINAL_SIZE, MAX_SCREEN_CHECKPOINT_BYTES, ScreenCheckpoint, type TerminalSize } from "@paddock/contracts";
import type { Encoder } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import { screenSize, type Capture } from "@paddock/screen";
import type { RunnerMetrics } from "../metrics.ts";
import type { CoalesceClock } from "./term-writer.ts";
import { openLocalScreen, type OpenScreen, type TrackedScreen } from "./screen-host.ts";

/**
 * Unparsed output past which the tracker gives up on an app placement: it
 * must never slow the app, and a backlog this large means escape-laden output
 * faster than the emulator parses (plain text costs a scan, not a parse).
 */
export const MAX_SCREEN_BACKLOG_BYTES = 16 * 1024 * 1024;

export interface ScreenTrackerOptions {
  js: JetStreamClient;
  /** The bus's encoder (encoderOf): it checks outgoing messages as the bus says. */
  encode: Encoder;
  /** `Subjects.screen` of this runner and app. */
  subject: string;
  placementGeneration: number;
  /** A checkpoint is written once output was quiet this long... */
  quietMs: number;
  /** ...at most this often, and this often while output never stops. */
  intervalMs: number;
  clock: CoalesceClock;
  metrics: Pick<RunnerMetrics, "screenCheckpoints" | "screenCheckpointsSkipped">;
  log: Logger;
  maxBacklogBytes?: number;
  publishTimeoutMs?: number;
  /** Where the emulator lives: the runner's screen worker (ScreenHost), else this thread. */
  openScreen?: OpenScreen;
}

/**
 * Keeps one app's screen for one placement, fed with every chunk this runner
 * committed to the app's log (in log order, with its TERM sequence), and
 * writes it to SCREENS as a checkpoint: the serialized screen and the cursor
 * it stands for. A `since=screen` attach then renders only the chunks after
 * the checkpoint, whatever the log's size. The emulator exists only once the
 * app printed something (an idle session costs nothing) and is freed when
 * the app's log ends.
 */
export class ScreenTracker {
  private emulator: TrackedScreen | undefined;
  /** The last checkpoint's screen: seeds the emulator again if output resumes after the log ended (a restart). */
  private lastScreen: Capture | undefined;
  /** TERM sequence of the last chunk fed. */
  private cursor = 0;
  /** The terminal's size as of the cursor (the log's resize markers). */
  private size: TerminalSize = INITIAL_TERMINAL_SIZE;
  private dirty = false;
  private dirtySince = 0;
  private lastOutputAt = 0;
  private lastCheckpointAt = Number.NEGATIVE_INFINITY;
  private cancelTimer: (() => void) | undefined;
  private writing: Promise<void> | undefined;
  /** The emulator fell behind: this placement writes no more checkpoints (readers replay from the last one). */
  private gaveUp = false;
  private stopped = false;

  constructor(private readonly opts: ScreenTrackerOptions) {}

  /** A chunk this runner committed to the app's log. */
  observe(seq: number, body: Uint8Array): void {
    if (this.stopped || this.gaveUp) return;
    const emulator = this.emulator ?? this.fresh();
    emulator.write(body);
    this.advance(seq, emulator);
  }

  /** A resize marker this runner committed to the app's log. */
  resized(seq: number, size: TerminalSize): void {
    this.size = size;
    if (this.stopped || this.gaveUp) return;
    // No screen yet (nothing printed): the next one starts at this size.
    if (!this.emulator) return;
    this.emulator.resize(screenSize(size.cols, size.rows));
    this.advance(seq, this.emulator);
  }

  private advance(seq: number, emulator: TrackedScreen): void {
    this.cursor = seq;
    if (emulator.backlogBytes > (this.opts.maxBacklogBytes ?? MAX_SCREEN_BACKLOG_BYTES)) {
      this.gaveUp = true;
      this.free();
      this.opts.metrics.screenCheckpointsSkipped.inc({ reason: "backlog" });
      this.opts.log.warn({ subject: this.opts.subject }, "screen emulator fell behind the output; no more checkpoints for this app placement");
      return;
    }
    const now = this.opts.clock.now();
    if (!this.dirty) this.dirtySince = now;
    this.dirty = true;
    this.lastOutputAt = now;
    this.schedule();
  }

  /**
   * The app's log ended (exit, suspend): writes the final screen now and
   * frees the emulator. Never rejects.
   */
  async settle(): Promise<void> {
    this.stopTimer();
    try {
      await this.writing;
      if (this.dirty && !this.stopped) await this.writeNow();
    } catch (err) {
      this.opts.log.debug({ err, subject: this.opts.subject }, "final screen checkpoint not written");
    }
    this.free();
  }

  /** Resolves once no checkpoint is being written. */
  async idle(): Promise<void> {
    await this.writing?.catch(() => undefined);
  }

  /** Shutdown or discard: nothing more is written. */
  abort(): void {
    this.stopped = true;
    this.stopTimer();
    this.free();
  }

  private fresh(): TrackedScreen {
    const last = this.lastScreen;
    // After the log ended, a restarted generation continues the same screen, at the size the log is at now.
    const emulator = (this.opts.openScreen ?? openLocalScreen)(screenSize(last?.cols ?? this.size.cols, last?.rows ?? this.size.rows));
    if (last !== undefined) {
      emulator.write(Buffer.from(last.screen, "utf8"));
      emulator.resize(screenSize(this.size.cols, this.size.rows));
    }
    this.emulator = emulator;
    return emulator;
  }

  private free(): void {
    this.emulator?.dispose();
    this.emulator = undefined;
  }

  /** When the next checkpoint is due: after a quiet moment or interval-long output, never sooner than interval after the last. */
  private dueAt(): number {
    const { quietMs, intervalMs } = this.opts;
    return Math.max(this.lastCheckpointAt + intervalMs, Math.min(this.lastOutputAt + quietMs, this.dirtySince + intervalMs));
  }

  private schedule(): void {
    if (this.cancelTimer || this.writing || !this.dirty || this.stopped) return;
    const wait = Math.max(0, this.dueAt() - this.opts.clock.now());
    this.cancelTimer = this.opts.clock.after(wait, () => {
      this.cancelTimer = undefined;
      if (this.opts.clock.now() < this.dueAt()) this.schedule();
      else void this.writeNow();
    });
  }

  private stopTimer(): void {
    this.cancelTimer?.();
    this.cancelTimer = undefined;
  }

  private writeNow(): Promise<void> {
    this.writing ??= this.write().finally(() => {
      this.writing = undefined;
      this.schedule();
    });
    return this.writing;
  }

  private async write(): Promise<void> {
    const emulator = this.emulator;
    if (!emulator || !this.dirty) return;
    this.dirty = false;
    this.lastCheckpointAt = this.opts.clock.now();
    const cursor = this.cursor;
    const body = await this.encode(emulator, cursor);
    if (!body) {
      this.opts.metrics.screenCheckpointsSkipped.inc({ reason: "too_large" });
      return;
    }
    const h = natsHeaders();
    h.set(Headers.placementGeneration, String(this.opts.placementGeneration));
    try {
      await this.opts.js.publish(this.opts.subject, body.bytes, { headers: h, timeout: this.opts.publishTimeoutMs ?? 5_000 });
      this.lastScreen = body.captured;
      this.opts.metrics.screenCheckpoints.inc();
    } catch (err) {
      // Best effort: a later checkpoint (or a reader's replay) covers it.
      if (this.cursor === cursor) this.dirty = true;
      this.opts.metrics.screenCheckpointsSkipped.inc({ reason: "failed" });
      this.opts.log.debug({ err, subject: this.opts.subject }, "screen checkpoint not written");
    }
  }

  /**
   * The checkpoint's body within MAX_SCREEN_CHECKPOINT_BYTES: escape
   * sequences grow in JSON, so scrollback is cut further when the first
   * try does not fit. Undefined when even the screen does not fit.
   */
  private async encode(emulator: TrackedScreen, cursor: number): Promise<{ bytes: Uint8Array; captured: Capture } | undefined> {
    for (const budget of [MAX_SCREEN_CHECKPOINT_BYTES, MAX_SCREEN_CHECKPOINT_BYTES / 8]) {
      // Captured as of the cursor: the size it repaints at is the one the log says there.
      const captured = await emulator.capture(budget);
      if (captured === undefined) return undefined;
      const bytes = this.opts.encode(ScreenCheckpoint, { cursor, ...captured });
      if (bytes.byteLength <= MAX_SCREEN_CHECKPOINT_BYTES) return { bytes, captured };
    }
    return undefined;
  }
}
