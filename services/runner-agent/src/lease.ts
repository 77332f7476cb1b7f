import type { KV } from "@nats-io/kv";
import { RunnerLease } from "@paddock/contracts";
import { encodeJson } from "@paddock/bus";
import type { Logger } from "@paddock/logging";

export interface LeaseRenewerOptions {
  kv: KV;
  key: string;
  lease: () => RunnerLease;
  intervalMs: number;
  log: Logger;
}

export interface LeaseRenewer {
  stop(): Promise<void>;
}

/**
 * Renews the runner's lease on an interval. A renewal that fails is logged and
 * the next tick tries again; a tick while one is in flight is skipped, so a
 * slow bus never piles up puts.
 */
export async function startLeaseRenewer(opts: LeaseRenewerOptions): Promise<LeaseRenewer> {
  let inFlight: Promise<void> | undefined;
  let failures = 0;
  const renew = (): Promise<void> => {
    inFlight ??= opts.kv
      .put(opts.key, encodeJson(RunnerLease, opts.lease()))
      .then(
        () => {
          if (failures > 0) opts.log.info({ failures }, "lease renewal recovered");
          failures = 0;
        },
        (err: unknown) => {
          if (failures === 0) opts.log.warn({ err }, "lease renewal failed");
          failures += 1;
        },
      )
      .finally(() => {
        inFlight = undefined;
      });
    return inFlight;
  };
  await renew();
  const timer = setInterval(() => void renew(), opts.intervalMs);
  return {
    stop: async () => {
      clearInterval(timer);
      await inFlight;
    },
  };
}
