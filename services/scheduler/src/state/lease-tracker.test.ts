/**
 * When the lease tracker judges a runner's lease gone: from an expiry after
 * the runner's latest registration, else from that registration (or the
 * replica's start) plus one TTL, never from an expiry that predates it.
 */
import { describe, expect, it } from "vitest";
import type { KV, KvEntry } from "@nats-io/kv";
import { LeaseTracker } from "./lease-tracker.ts";

const TTL = 2_000;
const GRACE = 1_000;

/** A tracker fed by a hand-driven watch: `put`/`expire` deliver entries as the lease watch would. */
function tracker() {
  let now = 0;
  const queue: KvEntry[] = [];
  let wake: (() => void) | undefined;
  const watch = {
    stop: () => undefined,
    async *[Symbol.asyncIterator]() {
      for (;;) {
        while (queue.length > 0) yield queue.shift() as KvEntry;
        await new Promise<void>((r) => (wake = r));
      }
    },
  };
  const t = new LeaseTracker(() => now);
  const kv = { watch: () => Promise.resolve(watch) } as unknown as KV;
  const deliver = async (operation: "PUT" | "DEL") => {
    queue.push({ key: "default.r1", operation, created: new Date(now) } as KvEntry);
    wake?.();
    // Let the tracker's loop take it.
    for (let i = 0; i < 5; i++) await Promise.resolve();
  };
  return {
    t,
    start: () => t.start(kv, { error: () => undefined } as never),
    at: (ms: number) => (now = ms),
    put: () => deliver("PUT"),
    expire: () => deliver("DEL"),
    lost: (since: number) => t.expiredFor("default.r1", since, TTL, GRACE),
  };
}

describe("LeaseTracker.expiredFor", () => {
  it("a lease never seen counts from since (the later of the replica's start and the runner's registration) plus one TTL", async () => {
    const x = tracker();
    await x.start();
    x.at(60_000);
    // Registered at 60 s (since = its registration), lease not seen yet.
    expect(x.lost(60_000)).toBe(false);
    x.at(60_000 + TTL + GRACE + 1);
    expect(x.lost(60_000)).toBe(true);
  });

  it("an expiry after the registration counts from the expiry", async () => {
    const x = tracker();
    await x.start();
    x.at(1_000);
    await x.put();
    x.at(5_000);
    await x.expire();
    x.at(5_000 + GRACE);
    expect(x.lost(0)).toBe(false);
    x.at(5_000 + GRACE + 1);
    expect(x.lost(0)).toBe(true);
  });

  it("a runner that registers again after its lease expired is judged from the new registration, not the old expiry", async () => {
    const x = tracker();
    await x.start();
    x.at(1_000);
    await x.put();
    x.at(5_000);
    await x.expire();
    // Lost meanwhile; registers again at 30 s, before its next lease put is seen.
    x.at(30_000);
    expect(x.lost(30_000)).toBe(false);
    x.at(30_001);
    await x.put();
    x.at(40_000);
    expect(x.lost(30_000)).toBe(false);
  });
});
