/**
 * Where an app's queued input goes: takes what it can right now, never blocks.
 * Answers the number of bytes taken (0: full for now) or "closed" (the process
 * or its stdin is gone: nothing will ever take the rest).
 */
export interface InputSink {
  tryWrite(bytes: Uint8Array): number | "closed";
}

export interface InputQueueOptions {
  /** Retries after a full sink start here and double up to maxRetryMs (a program not reading costs a syscall per max). */
  minRetryMs?: number;
  maxRetryMs?: number;
}

const DEFAULT_MIN_RETRY_MS = 1;
const DEFAULT_MAX_RETRY_MS = 50;

interface Waiter {
  lowWater: number;
  notify: () => void;
}

/**
 * One app's stdin queue. Bytes are written in order, without blocking the
 * event loop: what the sink does not take now is retried on a timer (a PTY
 * master offers no writable event node can watch without libuv's blocking
 * retry loop). Its size is bounded by the senders, who wait for `whenBelow`
 * (the credit answer on the input subject) before sending more.
 */
export class InputQueue {
  private chunks: Uint8Array[] = [];
  private size = 0;
  private timer: NodeJS.Timeout | undefined;
  private retryMs: number;
  private closedFlag = false;
  private waiters: Waiter[] = [];
  private readonly minRetryMs: number;
  private readonly maxRetryMs: number;
  /** Called whenever bytes reach the program (the log writer publishes its answer, an echo, at once). */
  onWrite: (() => void) | undefined;

  constructor(
    private readonly sink: InputSink,
    opts: InputQueueOptions = {},
  ) {
    this.minRetryMs = opts.minRetryMs ?? DEFAULT_MIN_RETRY_MS;
    this.maxRetryMs = opts.maxRetryMs ?? DEFAULT_MAX_RETRY_MS;
    this.retryMs = this.minRetryMs;
  }

  /** Bytes waiting for the program to read them. */
  get queuedBytes(): number {
    return this.size;
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  /** Appends bytes and writes what the sink takes now; false when the queue is closed (the bytes go nowhere). */
  push(bytes: Uint8Array): boolean {
    if (this.closedFlag) return false;
    if (bytes.byteLength === 0) return true;
    // A copy: the caller's buffer (a NATS message) may be reused.
    this.chunks.push(Uint8Array.prototype.slice.call(bytes));
    this.size += bytes.byteLength;
    if (this.timer === undefined) this.flush();
    return true;
  }

  /** Calls notify once the queue holds at most lowWater bytes, or is closed (at once if so already). */
  whenBelow(lowWater: number, notify: () => void): void {
    if (this.closedFlag || this.size <= lowWater) {
      notify();
      return;
    }
    this.waiters.push({ lowWater, notify });
  }

  /** Forgets a waiter registered with whenBelow (its request was answered otherwise). */
  cancelWait(notify: () => void): void {
    this.waiters = this.waiters.filter((w) => w.notify !== notify);
  }

  /** The process is gone: drops what is queued (answers how many bytes) and releases every waiter. */
  close(): number {
    if (this.closedFlag) return 0;
    this.closedFlag = true;
    const dropped = this.size;
    this.chunks = [];
    this.size = 0;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.release();
    return dropped;
  }

  private flush(): void {
    this.timer = undefined;
    let progressed = false;
    while (this.chunks.length > 0) {
      const head = this.chunks[0]!;
      const taken = this.sink.tryWrite(head);
      if (taken === "closed") {
        this.close();
        return;
      }
      if (taken > 0) {
        progressed = true;
        this.size -= taken;
        if (taken >= head.byteLength) this.chunks.shift();
        else this.chunks[0] = head.subarray(taken);
      }
      if (taken < head.byteLength) break;
    }
    this.retryMs = progressed ? this.minRetryMs : Math.min(this.maxRetryMs, this.retryMs * 2);
    if (progressed) {
      this.onWrite?.();
      this.release();
    }
    if (this.chunks.length > 0) this.timer = setTimeout(() => this.flush(), this.retryMs);
  }

  private release(): void {
    if (this.waiters.length === 0) return;
    const ready = this.waiters.filter((w) => this.closedFlag || this.size <= w.lowWater);
    if (ready.length === 0) return;
    this.waiters = this.waiters.filter((w) => !ready.includes(w));
    for (const w of ready) w.notify();
  }
}
