import type { NatsConnection } from "@nats-io/transport-node";
import { MAX_ACTIVITY_SESSIONS, RunnerActivity, Subjects } from "@paddock/contracts";
import { encoderOf } from "@paddock/bus";
import type { Logger } from "@paddock/logging";

/** How often a runner reports which sessions had output (far below the scheduler's idle window). */
export const DEFAULT_ACTIVITY_MS = 30_000;

export interface ActivityReporterOptions {
  nc: NatsConnection;
  poolId: string;
  runnerId: string;
  intervalMs: number;
  log: Logger;
}

/**
 * Tells the schedulers which sessions had terminal output lately, for the
 * idle policy of watch sessions: a set is marked as output is committed, and
 * once per interval its members go out in one report (several past
 * MAX_ACTIVITY_SESSIONS) on core NATS. Bus traffic is bounded by the
 * interval and the session count, never by the bytes written.
 */
export class ActivityReporter {
  private readonly active = new Set<string>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: ActivityReporterOptions) {}

  /** A session's app wrote output: it goes into the next report. */
  touch(sessionId: string): void {
    this.active.add(sessionId);
  }

  start(): void {
    this.timer = setInterval(() => this.flush(), this.opts.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Publishes what was marked since the last report, if anything. */
  flush(): void {
    if (this.active.size === 0) return;
    const ids = [...this.active];
    this.active.clear();
    const subject = Subjects.activity(this.opts.poolId, this.opts.runnerId);
    for (let i = 0; i < ids.length; i += MAX_ACTIVITY_SESSIONS) {
      const sessions = ids.slice(i, i + MAX_ACTIVITY_SESSIONS);
      try {
        this.opts.nc.publish(subject, encoderOf(this.opts.nc)(RunnerActivity, { poolId: this.opts.poolId, runnerId: this.opts.runnerId, sessions }));
      } catch (err) {
        // A closed connection: the next report (or the idle window's own slack) covers it.
        this.opts.log.debug({ err }, "activity report not sent");
      }
    }
  }
}
