import type { Session } from "@paddock/contracts";

interface Waiter {
  pred: (s: Session) => boolean;
  resolve: (s: Session | undefined) => void;
}

/**
 * Lets a request wait for a record to reach a condition, whichever replica's
 * write gets it there: it is fed by the sessions view, not by local writes.
 */
export class SessionWaiters {
  private readonly waiters = new Map<string, Set<Waiter>>();

  notify(key: string, session: Session | undefined): void {
    const set = this.waiters.get(key);
    if (!set || !session) return;
    for (const w of [...set]) {
      if (w.pred(session)) {
        set.delete(w);
        w.resolve(session);
      }
    }
    if (set.size === 0) this.waiters.delete(key);
  }

  /** Resolves with the first revision satisfying pred, or undefined after timeoutMs. */
  wait(key: string, current: Session, pred: (s: Session) => boolean, timeoutMs: number): Promise<Session | undefined> {
    if (pred(current)) return Promise.resolve(current);
    return new Promise((resolve) => {
      const set = this.waiters.get(key) ?? new Set<Waiter>();
      this.waiters.set(key, set);
      const timer = setTimeout(() => {
        set.delete(waiter);
        resolve(undefined);
      }, timeoutMs);
      const waiter: Waiter = {
        pred,
        resolve: (s) => {
          clearTimeout(timer);
          resolve(s);
        },
      };
      set.add(waiter);
    });
  }
}
