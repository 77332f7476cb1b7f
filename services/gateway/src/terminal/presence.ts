import type { Subscription } from "@nats-io/transport-node";
import { encoderOf } from "@paddock/bus";
import { PaddockError, Presence, Subjects, type Scope, type Session } from "@paddock/contracts";
import { realEvery, type GatewayContext } from "../context.ts";

/** One terminal client as presence and status tracking see it. */
export interface Watcher {
  readonly sessionId: string;
  readonly workspaceId: string;
  readonly scope: Scope;
  /**
   * A fresh read of the record after one of its facts: the watcher follows
   * the placement and sends `{"type":"status","state"}` when the state it last
   * told its client changed; a closed client ignores it.
   */
  observe(session: Session): void;
  /**
   * True while the watcher waits for a state its grant's read may already be
   * behind (a controller holding input until the session runs): joining then
   * re-reads the record, since a fact committed between that read and this
   * subscription would otherwise never be observed.
   */
  readonly awaitsState?: boolean;
}

/**
 * The clients of one session attached through this gateway. While there is at
 * least one: a presence heartbeat on `paddock.presence.<session>` (core NATS)
 * at once and every interval, and a subscription to the session's AUDIT
 * subject: every committed fact of the session is an audit event, so each one
 * triggers one read of the record and a status frame to the clients whose
 * state is stale. No polling, no watch of the sessions KV.
 */
class SessionWatch {
  readonly watchers = new Set<Watcher>();
  private readonly stopTimer: () => void;
  private readonly facts: Subscription;
  private refreshing = false;
  private again = false;

  constructor(
    private readonly ctx: GatewayContext,
    readonly sessionId: string,
    readonly workspaceId: string,
  ) {
    const { nc, config } = ctx.deps;
    this.facts = nc.subscribe(Subjects.audit(workspaceId, "session", sessionId), { callback: () => this.refresh() });
    this.stopTimer = (ctx.deps.every ?? realEvery)(config.presenceIntervalMs, () => this.publish());
  }

  publish(): void {
    const body = encoderOf(this.ctx.deps.nc)(Presence, { sessionId: this.sessionId, workspaceId: this.workspaceId, clients: this.watchers.size });
    try {
      this.ctx.deps.nc.publish(Subjects.presence(this.sessionId), body);
    } catch (err) {
      // A closed connection at shutdown: presence is advisory, the heartbeat simply stops.
      this.ctx.deps.log.debug({ err, sessionId: this.sessionId }, "presence not published");
    }
  }

  /** Re-reads the record; one read in flight, coalescing the facts that arrive meanwhile. */
  refresh(): void {
    if (this.refreshing) {
      this.again = true;
      return;
    }
    const first = this.watchers.values().next();
    if (first.done) return;
    this.refreshing = true;
    this.ctx
      .getSession(first.value.scope, this.sessionId)
      .then(
        (session) => {
          for (const w of this.watchers) w.observe(session);
        },
        (err: unknown) => {
          if (!(err instanceof PaddockError)) this.ctx.deps.log.warn({ err, sessionId: this.sessionId }, "status refresh failed");
        },
      )
      .finally(() => {
        this.refreshing = false;
        if (this.again) {
          this.again = false;
          this.refresh();
        }
      })
      .catch(() => undefined);
  }

  stop(): void {
    this.stopTimer();
    this.facts.unsubscribe();
  }
}

/** Tracks attached clients per session: presence heartbeats and status frames. */
export class PresenceTracker {
  private readonly sessions = new Map<string, SessionWatch>();

  constructor(private readonly ctx: GatewayContext) {}

  join(w: Watcher): void {
    let watch = this.sessions.get(w.sessionId);
    const first = watch === undefined;
    if (!watch) {
      watch = new SessionWatch(this.ctx, w.sessionId, w.workspaceId);
      this.sessions.set(w.sessionId, watch);
    }
    watch.watchers.add(w);
    if (first) watch.publish();
    if (w.awaitsState) watch.refresh();
  }

  leave(w: Watcher): void {
    const watch = this.sessions.get(w.sessionId);
    if (!watch?.watchers.delete(w)) return;
    if (watch.watchers.size > 0) return;
    this.sessions.delete(w.sessionId);
    watch.stop();
    watch.publish(); // clients: 0, once
  }

  /** Clients attached to a session through this gateway. */
  clientsOf(sessionId: string): number {
    return this.sessions.get(sessionId)?.watchers.size ?? 0;
  }
}
