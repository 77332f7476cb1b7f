/**
 * At most `max` events per sliding `windowMs`, by an injected clock. An event
 * over the limit is not refused for good: the caller learns how long until
 * the window has room and defers it to then (the trailing edge).
 */
export class SlidingWindowLimiter {
  private readonly times: number[] = [];

  constructor(
    private readonly max: number,
    private readonly windowMs: number,
    private readonly now: () => number,
  ) {}

  /** Records and admits the event when the window has room (0); otherwise the ms until it will have room. */
  acquireOrWait(): number {
    const t = this.now();
    while (this.times.length > 0 && (this.times[0] as number) <= t - this.windowMs) this.times.shift();
    if (this.times.length >= this.max) return Math.max(1, (this.times[0] as number) + this.windowMs - t);
    this.times.push(t);
    return 0;
  }
}
