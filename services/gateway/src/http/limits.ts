import { PaddockError } from "@paddock/contracts";

/** 429 `rate_limited`; the response carries `Retry-After: <retryAfterS>`. */
export class RateLimitedError extends PaddockError {
  constructor(
    message: string,
    readonly retryAfterS: number,
  ) {
    super("rate_limited", message);
  }
}

/**
 * At most `limit` events per key in each fixed window of `windowMs`, on the
 * injected clock. In memory, per gateway replica (N replicas allow N × limit).
 */
export class WindowLimiter {
  private readonly windows = new Map<string, { start: number; count: number }>();

  constructor(
    private readonly limit: number,
    private readonly windowMs: number,
    private readonly now: () => number,
  ) {}

  /** Counts one event; undefined when allowed, else the ms until the window resets. */
  take(key: string): number | undefined {
    const t = this.now();
    let w = this.windows.get(key);
    if (!w || t - w.start >= this.windowMs || t < w.start) {
      w = { start: t, count: 0 };
      this.windows.set(key, w);
      this.sweep(t);
    }
    if (w.count >= this.limit) return Math.max(1, w.start + this.windowMs - t);
    w.count++;
    return undefined;
  }

  /** Throws RateLimitedError when key is over its limit. */
  check(key: string, what: string): void {
    const waitMs = this.take(key);
    if (waitMs !== undefined) {
      throw new RateLimitedError(`${what}: more than ${this.limit} per ${this.windowMs / 1000} s`, Math.ceil(waitMs / 1000));
    }
  }

  /** Drops finished windows now and then, so idle keys do not accumulate. */
  private sweep(t: number): void {
    if (this.windows.size < 1024) return;
    for (const [k, w] of this.windows) if (t - w.start >= this.windowMs) this.windows.delete(k);
  }
}

/**
 * Per-socket input budget: `perSecond` frames in each 1 s window of the
 * injected clock. Frames past it are not dropped: the socket stops being read
 * until the window ends.
 */
export class FrameBudget {
  private start = Number.NEGATIVE_INFINITY;
  private count = 0;

  constructor(
    private readonly perSecond: number,
    private readonly now: () => number,
  ) {}

  /** Counts one frame: undefined when allowed now, else the ms until the window ends (nothing is counted). */
  take(): number | undefined {
    const t = this.now();
    if (t - this.start >= 1000 || t < this.start) {
      this.start = t;
      this.count = 0;
    }
    if (this.count < this.perSecond) {
      this.count++;
      return undefined;
    }
    return Math.max(1, this.start + 1000 - t);
  }
}
