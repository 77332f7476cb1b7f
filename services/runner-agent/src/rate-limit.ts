/**
 * At most `max` events per sliding `windowMs`, by an injected clock. An event
 * over the limit is refused (not deferred): the caller drops it.
 */
export class SlidingWindowLimiter {
  private readonly times: number[] = [];

  constructor(
    private readonly max: number,
    private readonly windowMs: number,
    private readonly now: () => number,
  ) {}

  /** Records and admits the event when the window has room; false otherwise. */
  tryAcquire(): boolean {
    const t = this.now();
    while (this.times.length > 0 && (this.times[0] as number) <= t - this.windowMs) this.times.shift();
    if (this.times.length >= this.max) return false;
    this.times.push(t);
    return true;
  }
}
