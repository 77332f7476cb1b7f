/**
 * When a runner last knew its registration to hold, dated by the moment it
 * ASKED (a registration request, a read of its runner record), never by the
 * moment it handled the answer. A process stopped (SIGSTOP, a paused VM)
 * after sending a read handles, once it runs again, an answer from before
 * the stop, followed by the input typed meanwhile: dated by its handling,
 * that stale "still registered" let the input reach a copy the scheduler had
 * already moved elsewhere (found by `pnpm chaos`, takeovers, round 142 of 200).
 */
export class RegistrationConfirmation {
  private confirmedAt: number;
  private readonly listeners = new Set<() => void>();

  constructor(
    private readonly now: () => number,
    /** How long a confirmation holds: the lease TTL, after which the scheduler may have moved the sessions (ms). */
    private readonly ttlMs: number,
  ) {
    this.confirmedAt = now();
  }

  /** The moment a check is asked, to hand to confirm once its answer says the registration holds. */
  ask(): number {
    return this.now();
  }

  /** The check asked at askedAt found the registration holding (an older answer never moves it back). */
  confirm(askedAt: number): void {
    this.confirmedAt = Math.max(this.confirmedAt, askedAt);
    for (const listener of [...this.listeners]) listener();
  }

  /** Calls listener after every confirmation; returns the unsubscribe. */
  onConfirm(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Whether the latest confirmation is still within the lease TTL. */
  holds(): boolean {
    return this.now() - this.confirmedAt <= this.ttlMs;
  }
}
