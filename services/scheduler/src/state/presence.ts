import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { Presence, RunnerActivity, Subjects, type Now } from "@paddock/contracts";
import { decodeJson, type BusMetrics } from "@paddock/bus";

interface Seen {
  clients: number;
  at: number;
}

/** `<pool>.<runner>` of a report's sender. */
const runnerKey = (poolId: string | undefined, runnerId: string | undefined) => `${poolId ?? ""}.${runnerId ?? ""}`;

/**
 * Who is attached where, from the gateways' heartbeats, and which sessions
 * had terminal output lately, from the runners' activity reports. Every
 * replica keeps its own copy (no queue group): idleness is a local
 * judgement, and the suspend it leads to is a compare-and-set any replica
 * may win. Times are this replica's clock at receipt (no clock crosses hosts).
 */
export class PresenceTracker {
  private readonly seen = new Map<string, Seen>();
  /** Session → sending runner → when its last report naming the session arrived. */
  private readonly active = new Map<string, Map<string, number>>();
  private subs: Subscription[] = [];

  constructor(
    private readonly now: Now,
    /** Heartbeats older than this no longer count as attached. */
    private readonly staleAfterMs: number,
  ) {}

  start(nc: NatsConnection, bus: BusMetrics): void {
    const presence = nc.subscribe(Subjects.presenceAll, {
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
    const activity = nc.subscribe(Subjects.activityAll, {
      callback: (err, msg) => {
        if (err) return;
        const decoded = decodeJson(RunnerActivity, msg.data);
        // A report speaks for the runner its subject names (the runner's NATS permission), nobody else.
        if (!decoded.ok || msg.subject !== Subjects.activity(decoded.value.poolId, decoded.value.runnerId)) {
          bus.invalidMessages.inc({ subject: Subjects.activityAll });
          return;
        }
        this.recordActivity(decoded.value);
      },
    });
    this.subs = [presence, activity];
  }

  stop(): void {
    for (const sub of this.subs) sub.unsubscribe();
    this.subs = [];
  }

  record(p: Presence): void {
    this.seen.set(p.sessionId, { clients: p.clients, at: this.now() });
  }

  recordActivity(report: RunnerActivity): void {
    const at = this.now();
    const from = runnerKey(report.poolId, report.runnerId);
    for (const sessionId of report.sessions) {
      let byRunner = this.active.get(sessionId);
      if (!byRunner) this.active.set(sessionId, (byRunner = new Map()));
      byRunner.set(from, at);
    }
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

  /**
   * When the session's runner last reported output for it; undefined when
   * never, or when the report came from a runner other than the one the
   * record places it on (a runner cannot keep another runner's sessions awake).
   */
  lastActiveAt(session: { id: string; poolId?: string; runnerId?: string }): number | undefined {
    return this.active.get(session.id)?.get(runnerKey(session.poolId, session.runnerId));
  }

  forget(sessionId: string): void {
    this.seen.delete(sessionId);
    this.active.delete(sessionId);
  }
}
