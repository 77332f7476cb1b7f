import type { KV } from "@nats-io/kv";
import { runnerKey, type Now, type Runner } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";

interface LeaseSeen {
  /** Last renewal this replica saw. */
  renewedAt?: number;
  /** When this replica saw the key expire (a TTL delete marker) or go. */
  expiredAt?: number;
}

/**
 * What the runner leases say, from a watch of `runner-leases`. A lease is a
 * KV key with a per-message TTL that the runner renews; when the runner stops,
 * the server expires the key and the watch sees its delete marker.
 */
export class LeaseTracker {
  private readonly seen = new Map<string, LeaseSeen>();
  /** The server's timestamp of each runner's latest renewal (the lease entry's own time). */
  private readonly renewals = new Map<string, number>();
  private stopWatch: (() => void) | undefined;

  constructor(private readonly now: Now) {}

  async start(kv: KV, log: Logger): Promise<void> {
    const watch = await kv.watch();
    this.stopWatch = () => watch.stop();
    void (async () => {
      for await (const e of watch) {
        if (e.operation === "PUT") {
          this.seen.set(e.key, { renewedAt: this.now() });
          this.renewals.set(e.key, e.created.getTime());
        }
        else this.seen.set(e.key, { ...this.seen.get(e.key), expiredAt: this.now() });
      }
    })().catch((err: unknown) => log.error({ err }, "lease watch ended"));
  }

  stop(): void {
    this.stopWatch?.();
  }

  /**
   * The record with `lastSeenAt` following the lease: the latest renewal's
   * server time when it is newer than the record's (set at registration).
   * Derived at read time, so renewals never become runner-record writes
   * (and audit revisions).
   */
  withLastSeen(runner: Runner): Runner {
    const renewed = this.renewals.get(runnerKey(runner.poolId, runner.id));
    return renewed !== undefined && renewed > runner.lastSeenAt ? { ...runner, lastSeenAt: renewed } : runner;
  }

  /**
   * Whether the runner's lease has been gone for longer than the grace period.
   * `since` is the later of this replica's start and the runner's latest
   * registration: a lease not seen since then counts from then, plus one TTL.
   * A runner registers before it puts its first lease, so judging a new
   * runner from the replica's start, or a re-registered one from the expiry
   * of its previous lease, would declare it lost again between its
   * registration and its first renewal.
   */
  expiredFor(key: string, since: number, leaseTtlMs: number, graceMs: number): boolean {
    const { renewedAt, expiredAt } = this.seen.get(key) ?? {};
    const now = this.now();
    // Expired after its latest renewal and after `since`: gone since then.
    if (expiredAt !== undefined && expiredAt >= since && (renewedAt === undefined || expiredAt >= renewedAt)) return now - expiredAt > graceMs;
    // Renewed after it last expired: alive.
    if (renewedAt !== undefined && (expiredAt === undefined || renewedAt > expiredAt)) return false;
    // Never seen, or only an expiry from before `since`: judged from `since`.
    return now - since > leaseTtlMs + graceMs;
  }
}
