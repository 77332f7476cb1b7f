import { INITIAL_TERMINAL_SIZE, Subjects, TERM_CHUNK_MAX_BYTES, type TerminalSize } from "@paddock/contracts";
import { isWrongLastSequence, refusedAtSequence } from "@paddock/bus";
import { chunkHeaders, readLastMessage, retryBackoff, sameSize, takeQueuedBytes, type Chunk, type LastMessage, type Pending } from "./term-log.ts";
import { DEFAULT_COALESCE_MS, realClock, type CoalesceClock, type TermWriterOptions } from "./term-options.ts";
import type { OutputStream } from "../sandbox/process-group.ts";

export { DEFAULT_COALESCE_MS, realClock, type CoalesceClock, type TermWriterOptions } from "./term-options.ts";

/**
 * Appends one app's PTY output to its TERM subject (under this runner's own
 * subject tokens), fenced by placement generation. Every publish asserts the
 * last sequence of the app's log across every runner's subject
 * (expected-last-subject-sequence over `termOfApp`), so once a successor
 * generation has written, this writer's next publish is refused and it
 * latches shut for good: retrying would mean re-reading the sequence and
 * overwriting the successor's log, which is exactly what fencing forbids.
 * One publish is in flight at a time; output arriving meanwhile is coalesced.
 *
 * Chunks are bounded in size (maxChunkBytes) and time (coalesceMs): output
 * that starts after a quiet moment, or that follows input written to the app
 * (an echo, a prompt), is published at once; output that keeps arriving is
 * held until the chunk is full or its first byte is coalesceMs old. So a fast
 * producer writes full chunks, which is what makes TERM's per-subject chunk
 * count a byte bound (see ARCHITECTURE.md, Storage).
 */
export class TermWriter {
  private readonly subject: string;
  /** The app's log across runners: the fence is checked against its last sequence. */
  private readonly fenceSubject: string;
  private readonly maxChunk: number;
  private pending: Pending[] = [];
  private pendingBytes = 0;
  private pendingMarkers = 0;
  /** The terminal's size: the app's PTY has it (a restart spawns at it). */
  private termSize: TerminalSize = INITIAL_TERMINAL_SIZE;
  /** The size the log says the terminal has once everything queued is committed. */
  private loggedSize: TerminalSize = INITIAL_TERMINAL_SIZE;
  private exitMarker: string | undefined;
  private markerSent = false;
  private lastSeq: number | undefined;
  private chunkIndex = 0;
  private latched = false;
  private aborted = false;
  private paused = false;
  /** Closed without an exit marker (cold suspend): later output is dropped. */
  private closed = false;
  private pump: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  private readonly coalesceMs: number;
  private readonly clock: CoalesceClock;
  /** When the last output arrived (clock ms): output arriving within coalesceMs of it "keeps arriving". */
  private lastAppendAt = Number.NEGATIVE_INFINITY;
  /** When the oldest pending byte arrived: the chunk is published by heldSince + coalesceMs at the latest. */
  private heldSince = 0;
  /** Publish what is pending without waiting for the window (new burst, input, flush). */
  private urgent = false;
  private cancelWindow: (() => void) | undefined;

  constructor(private readonly opts: TermWriterOptions) {
    this.subject = Subjects.term(opts.poolId, opts.runnerId, opts.sessionId, opts.app);
    this.fenceSubject = Subjects.termOfApp(opts.sessionId, opts.app);
    this.maxChunk = opts.maxChunkBytes ?? TERM_CHUNK_MAX_BYTES;
    this.coalesceMs = opts.coalesceMs ?? DEFAULT_COALESCE_MS;
    this.clock = opts.clock ?? realClock;
  }

  /** True once a successor generation has written; nothing is appended after. */
  get fenced(): boolean {
    return this.latched;
  }

  /** Messages this writer committed (chunks and the exit marker). */
  get committed(): number {
    return this.chunkIndex;
  }

  /** The app's terminal size as of the latest resize (INITIAL_TERMINAL_SIZE until one). */
  get size(): TerminalSize {
    return this.termSize;
  }

  /**
   * The app's terminal was resized: a marker goes into the log after the
   * output queued so far, so a reader renders what came before at the old
   * size and what follows at the new one (screen snapshots, see
   * ARCHITECTURE.md). Consecutive resizes with no output between them leave
   * one marker. A log that is finished or closed gets the marker when it reopens.
   */
  resize(size: TerminalSize): void {
    this.termSize = { cols: size.cols, rows: size.rows };
    if (this.latched || this.aborted || this.closed || this.exitMarker !== undefined) return;
    this.queueSizeMarker();
  }

  private queueSizeMarker(): void {
    const size = this.termSize;
    const tail = this.pending[this.pending.length - 1];
    if (tail?.size) {
      tail.size = size;
    } else {
      if (sameSize(size, this.loggedSize)) return;
      this.pending.push({ bytes: new Uint8Array(0), stream: undefined, size });
      this.pendingMarkers += 1;
    }
    this.loggedSize = size;
    this.urgent = true;
    this.kick();
  }

  /** Who to pause while output is backed up (set once the producer exists). */
  setPressureHandler(handler: (paused: boolean) => void): void {
    this.opts.onPressure = handler;
  }

  /**
   * Queues output; never blocks. Dropped once fenced, aborted, closed or
   * finished. Bytes of different streams are never coalesced into one chunk.
   */
  append(bytes: Uint8Array, stream?: OutputStream): void {
    if (this.latched || this.aborted || this.closed || this.exitMarker !== undefined || bytes.byteLength === 0) return;
    const now = this.clock.now();
    // Output after a quiet moment starts a burst: its first bytes go out at once.
    if (now - this.lastAppendAt >= this.coalesceMs) this.urgent = true;
    this.lastAppendAt = now;
    if (this.pendingBytes === 0) this.heldSince = now;
    this.pending.push({ bytes, stream });
    this.pendingBytes += bytes.byteLength;
    this.updatePressure();
    this.kick();
  }

  /**
   * Input was just written to the app: what it prints next (an echo, a
   * prompt) is published without waiting for the window.
   */
  noteInput(): void {
    this.urgent = true;
    if (this.pendingBytes > 0) this.kick();
  }

  /** Resolves once everything queued so far is committed, or immediately once fenced or aborted. */
  async flush(): Promise<void> {
    while (this.isOpen() && (this.pump !== undefined || this.hasWork())) {
      this.urgent = true;
      this.kick();
      await this.pump;
    }
  }

  /** Flushes, then appends the app's final empty message carrying its exit code. */
  async finish(exitCode: number | null): Promise<void> {
    if (this.exitMarker === undefined) this.exitMarker = exitCode === null ? "" : String(exitCode);
    await this.flush();
  }

  /**
   * After an exit marker (or close), accepts output again: the app's next
   * generation continues the same log. Call once finish/close resolved.
   */
  reopen(): void {
    this.exitMarker = undefined;
    this.markerSent = false;
    this.closed = false;
    // Resized while the log was finished: the next generation starts at the new size.
    if (!sameSize(this.termSize, this.loggedSize)) this.queueSizeMarker();
  }

  /** Flushes what is queued and accepts nothing more, without an exit marker (a suspend is not an exit). */
  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
  }

  /** Gives up on whatever is pending (shutdown with the bus gone); flush resolves. */
  abort(): void {
    this.aborted = true;
    this.dropPending();
    this.stopWindow();
    this.wake?.();
  }

  private isOpen(): boolean {
    return !this.latched && !this.aborted;
  }

  private hasWork(): boolean {
    return this.pendingBytes > 0 || this.pendingMarkers > 0 || (this.exitMarker !== undefined && !this.markerSent);
  }

  private kick(): void {
    if (this.pump || !this.isOpen() || !this.ready()) return;
    this.stopWindow();
    this.pump = this.run().finally(() => {
      this.pump = undefined;
      if (this.isOpen() && this.hasWork()) this.kick();
    });
  }

  /**
   * Whether what is pending should be published now; when output keeps
   * arriving and the chunk has room and time left, a timer is armed for the
   * end of its window instead.
   */
  private ready(): boolean {
    if (this.urgent || this.pendingBytes >= this.maxChunk || this.coalesceMs <= 0 || this.closed || this.pending[0]?.size) return true;
    if (this.pendingBytes === 0) return this.pendingMarkers > 0 || (this.exitMarker !== undefined && !this.markerSent);
    const left = this.heldSince + this.coalesceMs - this.clock.now();
    if (left <= 0) return true;
    this.cancelWindow ??= this.clock.after(left, () => {
      this.cancelWindow = undefined;
      this.urgent = true;
      this.kick();
    });
    return false;
  }

  private stopWindow(): void {
    this.cancelWindow?.();
    this.cancelWindow = undefined;
  }

  private async run(): Promise<void> {
    while (this.isOpen() && this.ready()) {
      const chunk = this.takeNext();
      if (!chunk) return;
      this.urgent = false;
      await this.publish(chunk);
    }
  }

  /** Coalesces pending output into one chunk of at most maxChunk bytes; the marker goes last. */
  private takeNext(): Chunk | undefined {
    const head = this.pending[0];
    if (head?.size) {
      this.pending.shift();
      this.pendingMarkers -= 1;
      return { body: head.bytes, size: head.size };
    }
    if (this.pendingBytes > 0) {
      const stream = this.pending[0]?.stream;
      return stream ? { body: this.takeBytes(stream), stream } : { body: this.takeBytes(undefined) };
    }
    if (this.exitMarker !== undefined && !this.markerSent) {
      this.markerSent = true;
      return { body: new Uint8Array(0), exitCode: this.exitMarker };
    }
    return undefined;
  }

  /** Takes up to maxChunk bytes from the head of the queue, stopping where the stream changes. */
  private takeBytes(stream: OutputStream | undefined): Uint8Array {
    const out = takeQueuedBytes(this.pending, stream, this.maxChunk);
    this.pendingBytes -= out.byteLength;
    this.updatePressure();
    return out;
  }

  /**
   * Publishes one chunk until it is committed or the writer latches. A
   * non-fencing error (timeout) is retried with the same message id: a
   * timed-out publish may have committed, and the id makes the retry a no-op.
   */
  private async publish(chunk: Chunk): Promise<void> {
    const msgID = `${this.opts.sessionId}.${this.opts.app}.${this.opts.placementGeneration}.${this.chunkIndex}`;
    for (let attempt = 0; this.isOpen(); attempt++) {
      try {
        this.lastSeq ??= (await this.readLast()).seq;
        const ack = await this.opts.js.publish(this.subject, chunk.body, {
          msgID,
          expect: { lastSubjectSequence: this.lastSeq, lastSubjectSequenceSubject: this.fenceSubject },
          headers: this.headersFor(chunk),
          timeout: this.opts.publishTimeoutMs ?? 5_000,
        });
        this.committedAt(ack.seq);
        this.tell(ack.seq, chunk);
        return;
      } catch (err) {
        if (isWrongLastSequence(err) && (await this.resolveRefusal(msgID, refusedAtSequence(err), chunk))) return;
        if (!this.isOpen()) return;
        this.opts.metrics.termRetries.inc();
        if (attempt === 0) this.opts.log.warn({ err, ...this.ids() }, "terminal publish failed; retrying");
        await this.sleep(this.backoff(attempt));
      }
    }
  }

  /**
   * Decides what a refusal means, knowing the log's actual last sequence.
   * True when the chunk is settled (committed earlier under the same id, or
   * the writer latched); false to retry. Only a predecessor's late write
   * (older generation) is stepped over: this writer is the successor then,
   * and the predecessor will be refused next. When the last chunk is on this
   * runner's own subject its header says whose it is; otherwise it is another
   * runner's, and the session record decides.
   */
  private async resolveRefusal(msgID: string, actualSeq: number | undefined, chunk: Chunk): Promise<boolean> {
    if (actualSeq === undefined) return false;
    let own: LastMessage;
    try {
      own = await this.readLast();
    } catch {
      return false;
    }
    if (own.seq === actualSeq) {
      if (own.msgId === msgID) {
        this.committedAt(own.seq);
        this.tell(own.seq, chunk);
        return true;
      }
      if (own.generation < this.opts.placementGeneration) {
        this.lastSeq = actualSeq;
        return false;
      }
      this.latch();
      return true;
    }
    let current: boolean;
    try {
      current = await this.opts.isCurrentPlacement();
    } catch {
      return false;
    }
    if (current) {
      this.lastSeq = actualSeq;
      return false;
    }
    this.latch();
    return true;
  }

  /** Tells the screen what was committed: output or a resize (not the exit marker). */
  private tell(seq: number, chunk: Chunk): void {
    if (chunk.size) this.opts.onResized?.(seq, chunk.size);
    else if (chunk.exitCode === undefined) this.opts.onCommitted?.(seq, chunk.body);
  }

  private committedAt(seq: number): void {
    this.lastSeq = seq;
    this.chunkIndex += 1;
  }

  private latch(): void {
    if (this.latched) return;
    this.latched = true;
    this.dropPending();
    this.opts.metrics.termFenced.inc();
    this.opts.log.warn(this.ids(), "terminal writer fenced by a newer generation; latched shut");
  }

  /** The last message on this runner's own subject (see readLastMessage). */
  private readLast(): Promise<LastMessage> {
    return readLastMessage(this.opts.jsm, this.subject);
  }

  private headersFor(chunk: Chunk) {
    return chunkHeaders(chunk, this.opts.placementGeneration);
  }

  private dropPending(): void {
    this.pending = [];
    this.pendingBytes = 0;
    this.pendingMarkers = 0;
    this.updatePressure();
  }

  private updatePressure(): void {
    const high = this.opts.highWaterBytes ?? 4 * 1024 * 1024;
    const shouldPause = this.paused ? this.pendingBytes > high / 2 : this.pendingBytes > high;
    if (shouldPause === this.paused) return;
    this.paused = shouldPause;
    this.opts.onPressure?.(shouldPause);
  }

  private backoff(attempt: number): number {
    return retryBackoff(attempt, this.opts.retryDelayMs ?? 100, this.opts.maxRetryDelayMs ?? 2_000);
  }

  /** A retry delay that abort() cuts short. */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      const self = this;
      function done() {
        clearTimeout(timer);
        self.wake = undefined;
        resolve();
      }
      this.wake = done;
    });
  }

  private ids() {
    return { sessionId: this.opts.sessionId, app: this.opts.app, placementGeneration: this.opts.placementGeneration };
  }
}
