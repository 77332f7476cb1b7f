/**
 * Exact reads of a key, shared by every caller that asked before the read was
 * sent. The read goes out on the next turn of the event loop, so callers
 * handling one delivered batch (e.g. the `running` facts of the sessions one
 * pass put on a runner) share one round trip; and since a caller only joins a
 * read that has not been sent yet, what it gets was read after it asked — as
 * exact as a read of its own.
 */
export class CoalescedReads<T> {
  private readonly waiting = new Map<string, Promise<T>>();

  constructor(private readonly read: (key: string) => Promise<T>) {}

  get(key: string): Promise<T> {
    let p = this.waiting.get(key);
    if (!p) {
      p = new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
        // From here on, newcomers start a read of their own.
        this.waiting.delete(key);
        return this.read(key);
      });
      this.waiting.set(key, p);
    }
    return p;
  }
}
