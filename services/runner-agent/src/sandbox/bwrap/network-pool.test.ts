import { existsSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSandboxNetworks, type SandboxNetworks } from "./network.ts";
import { createNetworkPool } from "./network-pool.ts";
import { probeBwrap } from "./probe.ts";
import { testHostIds, TEST_PATH } from "./test-sandbox.ts";

let networks: SandboxNetworks;

beforeAll(async () => {
  const { firstUid, instance, prefix } = testHostIds();
  const cap = await probeBwrap({ uid: firstUid, gid: firstUid, path: TEST_PATH });
  if (!cap.network.ip || !cap.network.nft) throw new Error(`no per-session networks here: ${cap.network.reason ?? ""}`);
  // Its own instance name: the other test files of this process family use testHostIds' as is.
  networks = createSandboxNetworks({ ip: cap.network.ip, nft: cap.network.nft, instance: `${instance.slice(0, 3)}p`, prefix: [prefix[0], prefix[1] - 100] });
  await networks.start();
});

afterAll(async () => {
  await networks?.stop();
});

describe("createNetworkPool", () => {
  it("keeps networks ready, hands each out once, and destroys released and idle ones", async () => {
    const errors: unknown[] = [];
    const pool = createNetworkPool({ networks, size: 2, slots: 8, onError: (e) => errors.push(e) });
    await pool.filled();
    expect(pool.readyCount).toBe(2);
    const [a, b] = [await pool.take(), await pool.take()];
    expect(a.netnsPath).not.toBe(b.netnsPath);
    expect(a.hostAddress).not.toBe(b.hostAddress);
    expect(existsSync(a.netnsPath)).toBe(true);
    // Taking refills in the background.
    await new Promise((resolve) => setImmediate(resolve));
    await pool.filled();
    expect(pool.readyCount).toBe(2);
    pool.release(a);
    await pool.stop();
    expect(existsSync(a.netnsPath)).toBe(false);
    expect(existsSync(b.netnsPath)).toBe(true); // still the session's
    await b.destroy();
    expect(existsSync(b.netnsPath)).toBe(false);
    expect(errors).toEqual([]);
  });

  it("builds one on the spot when none is ready", async () => {
    const pool = createNetworkPool({ networks, size: 0, slots: 2, onError: () => undefined });
    const net = await pool.take();
    expect(existsSync(net.netnsPath)).toBe(true);
    pool.release(net);
    await pool.stop();
    expect(existsSync(net.netnsPath)).toBe(false);
  });

  it("tells how many builds and teardowns are under way, down to none once idle", async () => {
    const underWay: number[] = [];
    const pool = createNetworkPool({ networks, size: 1, slots: 4, onError: () => undefined, onWork: (n) => underWay.push(n) });
    await pool.filled();
    expect(underWay).toEqual([1, 0]); // the build of the one ready network
    const net = await pool.take();
    pool.release(net);
    await new Promise((resolve) => setImmediate(resolve));
    expect(underWay.at(-1)).toBeGreaterThan(0); // its teardown (and the refill) under way
    await pool.idle();
    expect(underWay.at(-1)).toBe(0);
    expect(existsSync(net.netnsPath)).toBe(false);
    await pool.stop();
    expect(underWay.at(-1)).toBe(0);
  });
});
