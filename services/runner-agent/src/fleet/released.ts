import type { HeldSession } from "@paddock/contracts";
import type { FactBody } from "./facts.ts";

/** How long a released placement is remembered: far longer than the scheduler takes to apply a fact. */
const KEEP_MS = 10 * 60_000;
/** And at most this many (the oldest go first). */
const MAX_KEPT = 1_000;

interface Released {
  held: HeldSession;
  /** The fact that released the sandbox (a cold suspend, with its checkpoint and seal key). */
  body: FactBody;
  at: number;
}

/**
 * Placements whose sandbox a cold suspend released, with the fact that said
 * so. If a re-registration lands before the scheduler applied that fact, the
 * new generation's fence drops it, and a registration that no longer lists
 * the placement would end its record `dead`, its checkpoint never named. So
 * the runner lists these as held when it registers and, where the reply shows
 * the record still live, states the fact again under the new generation.
 */
export class ReleasedPlacements {
  private readonly byId = new Map<string, Released>();

  constructor(private readonly now: () => number) {}

  add(held: HeldSession, body: FactBody): void {
    this.byId.delete(held.sessionId);
    this.byId.set(held.sessionId, { held, body, at: this.now() });
    while (this.byId.size > MAX_KEPT) {
      const oldest = this.byId.keys().next().value;
      if (oldest === undefined) break;
      this.byId.delete(oldest);
    }
  }

  forget(sessionId: string): void {
    this.byId.delete(sessionId);
  }

  /** The remembered placements, oldest first (those past KEEP_MS are dropped). */
  list(): Released[] {
    const since = this.now() - KEEP_MS;
    for (const [id, r] of this.byId) if (r.at < since) this.byId.delete(id);
    return [...this.byId.values()];
  }
}
