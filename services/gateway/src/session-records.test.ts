/**
 * The gateway's own read of a session record (decision 0071): the latest
 * revision from the sessions bucket's stream leader, as the scheduler stores it.
 */
import { describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Buckets, PaddockError, sessionKey } from "@paddock/contracts";
import { sessionRecordReader } from "./session-records.ts";
import { makeSession, useHarness, WS1, WS2 } from "./testing/testkit.ts";

const h = useHarness();

describe("sessionRecordReader", () => {
  const reader = () => sessionRecordReader(() => jetstreamManager(h.nc));
  const sessions = () => new Kvm(h.nc).open(Buckets.sessions);

  it("reads the latest revision of a record, and nothing under another workspace's key", async () => {
    const kv = await sessions();
    const first = makeSession({ id: "rec1", workspaceId: WS1, creatorId: "alice" });
    await kv.put(sessionKey(WS1, "rec1"), JSON.stringify(first));
    await kv.put(sessionKey(WS1, "rec1"), JSON.stringify({ ...first, state: "running" }));
    expect(await reader()(WS1, "rec1")).toEqual({ ...first, state: "running" });
    expect(await reader()(WS2, "rec1")).toBeUndefined();
    expect(await reader()(WS1, "never-stored")).toBeUndefined();
  });

  it("a deleted or purged record reads as none", async () => {
    const kv = await sessions();
    await kv.put(sessionKey(WS1, "rec2"), JSON.stringify(makeSession({ id: "rec2", workspaceId: WS1 })));
    await kv.delete(sessionKey(WS1, "rec2"));
    expect(await reader()(WS1, "rec2")).toBeUndefined();
    await kv.put(sessionKey(WS1, "rec3"), JSON.stringify(makeSession({ id: "rec3", workspaceId: WS1 })));
    await kv.purge(sessionKey(WS1, "rec3"));
    expect(await reader()(WS1, "rec3")).toBeUndefined();
  });

  it("a record that does not parse is unavailable, naming no content", async () => {
    const kv = await sessions();
    await kv.put(sessionKey(WS1, "rec4"), JSON.stringify({ id: "rec4", secret: "s3cr3t" }));
    const err = await reader()(WS1, "rec4").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PaddockError);
    expect((err as PaddockError).code).toBe("unavailable");
    expect(String((err as Error).message)).not.toContain("s3cr3t");
  });

  it("a store that does not answer is unavailable (retryable), not a raw error", async () => {
    const failing = sessionRecordReader(() => Promise.reject(new Error("no JetStream")));
    const err = await failing(WS1, "rec5").catch((e: unknown) => e);
    expect((err as PaddockError).code).toBe("unavailable");
    expect((err as PaddockError).retryable).toBe(true);
  });
});
