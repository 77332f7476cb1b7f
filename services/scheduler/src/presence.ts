import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { Presence, Subjects, type Now } from "@paddock/contracts";
import { decodeJson, type BusMetrics } from "@paddock/bus";

interface Seen {
  clients: number;
  at: number;
}

/**
 * Who is attached where, from the gateways' heartbeats. Every replica keeps
 * its own copy (no queue group): idleness is a local judgement, and the
 * suspend it leads to is a compare-and-set any replica may win.
 */
export class PresenceTracker {
  private readonly seen = new Map<string, Seen>();
  private sub: Subscription | undefined;

  constructor(
    private readonly now: Now,
    /** Heartbeats older than this no longer count as attached. */
    private readonly staleAfterMs: number,
  ) {}

  start(nc: NatsConnection, bus: BusMetrics): void {
    this.sub = nc.subscribe(Subjects.presenceAll, {
      callback: (err, msg) => {
        if (err) return;
        const decoded = decodeJson(Presence, msg.data);
        if (!decoded.ok) {
          bus.invalidMessages.inc({ subject: msg.subject });
          return;
        }
        this.record(decoded.value);
      },
    });
  }

  stop(): void {
    this.sub?.unsubscribe();
  }

  record(p: Presence): void {
    this.seen.set(p.sessionId, { clients: p.clients, at: this.now() });
  }

  /** Whether a client is attached now, as far as fresh heartbeats say. */
  attached(sessionId: string): boolean {
    const s = this.seen.get(sessionId);
    return s !== undefined && s.clients > 0 && this.now() - s.at <= this.staleAfterMs;
  }

  /** When a client was last known attached; undefined when never seen by this replica. */
  lastAttachedAt(sessionId: string): number | undefined {
    const s = this.seen.get(sessionId);
    if (!s) return undefined;
    return s.clients > 0 ? Math.min(this.now(), s.at + this.staleAfterMs) : s.at;
  }

  forget(sessionId: string): void {
    this.seen.delete(sessionId);
  }
}
