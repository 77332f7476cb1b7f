import type { JetStreamClient } from "@nats-io/jetstream";
import { RunnerLease } from "@paddock/contracts";
import type { Encoder } from "@paddock/bus";
import type { Logger } from "@paddock/logging";

export interface LeaseRenewerOptions {
  js: JetStreamClient;
  /** The bus's encoder (encoderOf): it checks outgoing messages as the bus says. */
  encode: Encoder;
  bucket: string;
  key: string;
  lease: () => RunnerLease;
  intervalMs: number;
  /** Lifetime of each renewal; the server expires the key when no renewal follows in time. */
  ttlMs: number;
  /** Runs after every renewal attempt (the fence check); its failures are its own business. */
  afterRenew?: () => Promise<void>;
  log: Logger;
}

export interface LeaseRenewer {
  /** Renews now (and runs afterRenew), or joins the renewal in flight. */
  renewNow(): Promise<void>;
  stop(): Promise<void>;
}

/** The server expires per-message TTLs at second granularity: round up so a lease never lives shorter than asked. */
export function ttlDuration(ms: number): string {
  return `${Math.max(1, Math.ceil(ms / 1000))}s`;
}

/** The KV bucket's subject for a key: publishing there with a TTL is a put that expires. */
export function kvSubject(bucket: string, key: string): string {
  return `$KV.${bucket}.${key}`;
}

/**
 * Renews the runner's lease on an interval: a put to the lease bucket with a
 * per-message TTL, so when renewals stop (crash, SIGSTOP, partition) the
 * server removes the key and leaves a delete marker for the scheduler. A
 * renewal that fails is logged and the next tick tries again; a tick while
 * one is in flight is skipped, so a slow bus never piles up puts.
 */
export async function startLeaseRenewer(opts: LeaseRenewerOptions): Promise<LeaseRenewer> {
  const subject = kvSubject(opts.bucket, opts.key);
  const ttl = ttlDuration(opts.ttlMs);
  let inFlight: Promise<void> | undefined;
  let failures = 0;
  let stopped = false;
  const publish = async (): Promise<void> => {
    try {
      await opts.js.publish(subject, opts.encode(RunnerLease, opts.lease()), { ttl, timeout: Math.min(opts.ttlMs, 5_000) });
      if (failures > 0) opts.log.info({ failures }, "lease renewal recovered");
      failures = 0;
    } catch (err) {
      if (failures === 0) opts.log.warn({ err }, "lease renewal failed");
      failures += 1;
    }
  };
  const renew = (): Promise<void> => {
    if (stopped) return Promise.resolve();
    inFlight ??= (async () => {
      await publish();
      if (!stopped) await opts.afterRenew?.();
    })().finally(() => {
      inFlight = undefined;
    });
    return inFlight;
  };
  await publish();
  const timer = setInterval(() => void renew(), opts.intervalMs);
  return {
    renewNow: renew,
    stop: async () => {
      stopped = true;
      clearInterval(timer);
      await inFlight;
    },
  };
}
