import type { JetStreamClient } from "@nats-io/jetstream";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { EXEC_CHUNK_MAX_BYTES, EXEC_CREDIT_WINDOW_BYTES, Headers, type ExecExit } from "@paddock/contracts";
import type { OutputStream } from "../sandbox/process-group.ts";

/** Output queued here (not yet published) past which the process's pipes stop being read. */
const QUEUE_HIGH_WATER_BYTES = 1024 * 1024;

export interface ExecLogOptions {
  js: JetStreamClient;
  subject: string;
  /** Message ids are `<idPrefix>.<index>`: a publish retried after a lost ack is stored once. */
  idPrefix: string;
  /** An attached reader grants credit (credit()); the log stays within EXEC_CREDIT_WINDOW_BYTES of it. */
  attached: boolean;
  /** Stops or resumes reading the process's pipes: the pipe then fills and the command waits. */
  setPaused: (paused: boolean) => void;
  windowBytes?: number;
  publishTimeoutMs?: number;
  /** Waits before a failed publish is retried (attempt counts from 0). */
  retryDelay?: (attempt: number) => Promise<void>;
  onPublishError?: (err: unknown) => void;
  /** A chunk of output was committed. */
  onPublished?: (() => void) | undefined;
  /** The log stopped a window ahead of its reader's credit (what the tests wait on). */
  onWaitingForCredit?: () => void;
}

interface Queued {
  bytes: Uint8Array;
  stream: OutputStream;
}

/**
 * One exec'd process's output log on EXEC: chunks of one stream each, in
 * order, one publish in flight (what arrives meanwhile is coalesced into the
 * next), then the exit as the last message. Backpressure, not loss: past its
 * queue bound, or a window ahead of an attached reader's credit, the log
 * pauses the process's pipes.
 */
export class ExecLog {
  private queue: Queued[] = [];
  private queuedBytes = 0;
  private published = 0;
  private credited = 0;
  private index = 0;
  private paused = false;
  private closed = false;
  private aborted = false;
  private pump: Promise<void> = Promise.resolve();
  private pumping = false;
  private wakeCredit: (() => void) | undefined;
  private readonly window: number;

  constructor(private readonly opts: ExecLogOptions) {
    this.window = opts.windowBytes ?? EXEC_CREDIT_WINDOW_BYTES;
  }

  /** Bytes of output published so far. */
  get publishedBytes(): number {
    return this.published;
  }

  append(bytes: Uint8Array, stream: OutputStream): void {
    if (this.closed || bytes.byteLength === 0) return;
    this.queue.push({ bytes, stream });
    this.queuedBytes += bytes.byteLength;
    this.updatePaused();
    this.startPump();
  }

  /** The reader has taken `bytes` in all (credits only grow; an older one arriving late changes nothing). */
  credit(bytes: number): void {
    if (bytes <= this.credited) return;
    this.credited = bytes;
    this.updatePaused();
    const wake = this.wakeCredit;
    this.wakeCredit = undefined;
    wake?.();
  }

  /** Publishes what is queued, then the exit; later output is dropped (the process has ended). */
  async finish(exit: ExecExit): Promise<void> {
    this.startPump();
    await this.pump;
    if (this.closed) return;
    this.closed = true;
    const h = natsHeaders();
    h.set(Headers.execExit, "1");
    await this.publish(new TextEncoder().encode(JSON.stringify(exit)), h);
  }

  /** Stops for good without an exit (the runner lost the session): nothing more is published. */
  abort(): void {
    this.closed = true;
    this.aborted = true;
    this.queue = [];
    this.queuedBytes = 0;
    this.wakeCredit?.();
  }

  private get overWindow(): boolean {
    return this.opts.attached && this.published - this.credited >= this.window;
  }

  private updatePaused(): void {
    const pause = this.queuedBytes > QUEUE_HIGH_WATER_BYTES || this.overWindow;
    if (pause === this.paused) return;
    this.paused = pause;
    this.opts.setPaused(pause);
  }

  private startPump(): void {
    if (this.pumping) return;
    this.pumping = true;
    this.pump = this.drain().finally(() => {
      this.pumping = false;
    });
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0 && !this.closed) {
      if (this.overWindow) {
        await new Promise<void>((resolve) => {
          this.wakeCredit = resolve;
          this.opts.onWaitingForCredit?.();
        });
        continue;
      }
      const { stream, bytes } = this.take();
      const h = natsHeaders();
      h.set(Headers.stream, stream);
      await this.publish(bytes, h);
      if (this.aborted) return;
      this.opts.onPublished?.();
      this.published += bytes.byteLength;
      this.updatePaused();
    }
  }

  /** Up to EXEC_CHUNK_MAX_BYTES of the head's stream from the front of the queue. */
  private take(): Queued {
    const stream = (this.queue[0] as Queued).stream;
    let size = 0;
    for (const q of this.queue) {
      if (q.stream !== stream || size >= EXEC_CHUNK_MAX_BYTES) break;
      size += q.bytes.byteLength;
    }
    size = Math.min(size, EXEC_CHUNK_MAX_BYTES);
    const out = new Uint8Array(size);
    let filled = 0;
    while (filled < size) {
      const head = this.queue[0] as Queued;
      const n = Math.min(head.bytes.byteLength, size - filled);
      out.set(head.bytes.subarray(0, n), filled);
      filled += n;
      if (n === head.bytes.byteLength) this.queue.shift();
      else this.queue[0] = { bytes: head.bytes.subarray(n), stream };
    }
    this.queuedBytes -= size;
    return { bytes: out, stream };
  }

  private async publish(body: Uint8Array, headers: ReturnType<typeof natsHeaders>): Promise<void> {
    const msgID = `${this.opts.idPrefix}.${this.index}`;
    this.index += 1;
    for (let attempt = 0; ; attempt++) {
      try {
        await this.opts.js.publish(this.opts.subject, body, { msgID, headers, timeout: this.opts.publishTimeoutMs ?? 5_000 });
        return;
      } catch (err) {
        this.opts.onPublishError?.(err);
        if (this.aborted) return;
        await (this.opts.retryDelay ?? defaultRetryDelay)(attempt);
      }
    }
  }
}

function defaultRetryDelay(attempt: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.min(50 * 2 ** Math.min(attempt, 6), 2_000)));
}
