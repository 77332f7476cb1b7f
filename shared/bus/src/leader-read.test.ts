import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { startNatsServer, type NatsServerHandle } from "@paddock/testing";
import { readLatestFromLeader } from "./index.ts";

let server: NatsServerHandle;
let nc: NatsConnection;

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url });
});
afterAll(async () => {
  await nc.drain();
  await server.stop();
});

describe("reading a KV key from its stream's leader", () => {
  it("answers the latest value with the revision a compare-and-set names, and nothing for a missing or deleted key", async () => {
    const kv = await new Kvm(nc).create("leader-read", { history: 4 });
    const jsm = await jetstreamManager(nc);
    const text = (e: { value: Uint8Array } | undefined) => (e ? new TextDecoder().decode(e.value) : undefined);
    expect(await readLatestFromLeader(jsm, "leader-read", "a.b")).toBeUndefined();
    const first = await kv.create("a.b", "one");
    await kv.put("a.c", "other key");
    const second = await kv.update("a.b", "two", first);
    const latest = await readLatestFromLeader(jsm, "leader-read", "a.b");
    expect([text(latest), latest?.revision]).toEqual(["two", second]);
    // The revision read is the one an update must name.
    await expect(kv.update("a.b", "three", latest?.revision ?? 0)).resolves.toBeGreaterThan(second);
    expect(text(await readLatestFromLeader(jsm, "leader-read", "a.b"))).toBe("three");
    await kv.delete("a.b");
    expect(await readLatestFromLeader(jsm, "leader-read", "a.b")).toBeUndefined();
    await kv.put("a.c", "again");
    await kv.purge("a.c");
    expect(await readLatestFromLeader(jsm, "leader-read", "a.c")).toBeUndefined();
  });
});
