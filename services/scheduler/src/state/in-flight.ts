/**
 * The API requests a replica is answering. A replica that stops (a rolling
 * restart) first stops taking requests, then waits for these — bounded —
 * before it stops its views and the bus connection closes: without the wait,
 * a request it had taken lost its answer, and the gateway answered 503 only
 * after its request timeout (the client saw seconds of unavailability for a
 * call that had succeeded).
 */
export class InFlight {
  private readonly running = new Set<Promise<unknown>>();

  /** Runs `work`, tracked until it settles. */
  track<A extends unknown[], T>(work: (...args: A) => Promise<T>): (...args: A) => Promise<T> {
    return (...args) => {
      const p = work(...args);
      this.running.add(p);
      const forget = () => this.running.delete(p);
      p.then(forget, forget);
      return p;
    };
  }

  get size(): number {
    return this.running.size;
  }

  /** Resolves once every tracked request settled, or after boundMs; answers how many were still running then. */
  async settled(boundMs: number): Promise<number> {
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((r) => (timer = setTimeout(r, boundMs)));
    await Promise.race([Promise.allSettled([...this.running]), bound]);
    clearTimeout(timer);
    return this.running.size;
  }
}
