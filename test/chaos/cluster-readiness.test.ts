/**
 * The broker scenario injects faults only into a cluster that serves
 * JetStream, and reads its stores only from one: `waitForReady` against a real
 * 3-node cluster, after the node leading an R3 stream was killed (-9) and
 * restarted, means what the harness relies on, in the servers' own answers.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { metaOf, startNatsCluster, type NatsClusterHandle } from "@paddock/testing";
import { readStream } from "../../chaos/src/client.ts";

const COUNT = 5_020;
let cluster: NatsClusterHandle;
let nc: NatsConnection;

beforeAll(async () => {
  cluster = await startNatsCluster();
  nc = await connect({ servers: cluster.urls.split(","), maxReconnectAttempts: -1, reconnectTimeWait: 100 });
});
afterAll(async () => {
  await nc?.close();
  await cluster?.stop();
});

/** The two survivors elect a new stream leader (its own answer, asked again until it names one). */
async function waitForStreamLeader(jsm: JetStreamManager, stream: string): Promise<void> {
  for (;;) {
    const leader = await jsm.streams.info(stream).then((i) => i.cluster?.leader, () => undefined);
    if (leader) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function metaLeaders(): Promise<string[]> {
  return Promise.all(cluster.nodes.map(async (n) => (await metaOf(n))?.leader ?? ""));
}

describe("NATS cluster readiness", () => {
  it("after the node leading an R3 stream is killed and restarted, ready means one meta leader and the stream led, current and readable", async () => {
    await cluster.waitForReady();
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: "T", subjects: ["t.>"], num_replicas: 3 });
    const js = jsm.jetstream();
    // A new stream's subjects reach the node this client is on by gossip, after
    // the create answered: until then a publish has no responders. The client's
    // own retry covers that window; the msgID keeps a retried publish single.
    const publish = (i: number, body: string) => js.publish(`t.${i}`, body, { retries: 20, msgID: `t.${i}` });
    for (let i = 0; i < 20; i++) await publish(i, String(i));
    await cluster.waitForReady();
    const leader = (await jsm.streams.info("T")).cluster?.leader ?? "";
    const victim = cluster.nodes.findIndex((n) => n.name === leader);
    expect(victim).toBeGreaterThanOrEqual(0);

    await cluster.kill(victim);
    // One look while the node is down: not ready, and it says why.
    expect(await cluster.readiness()).toEqual(expect.any(String));
    // Writes the restarted node has to catch up on.
    await waitForStreamLeader(jsm, "T");
    const body = "x".repeat(1_000);
    for (let i = 20; i < COUNT; i += 500) await Promise.all(Array.from({ length: 500 }, (_, k) => publish(i + k, body)));
    await cluster.restart(victim);
    await cluster.waitForReady();

    // What ready promised, in the servers' own answers.
    const leaders = await metaLeaders();
    expect(new Set(leaders).size).toBe(1);
    expect(leaders[0]).not.toBe("");
    const info = await (await jetstreamManager(nc)).streams.info("T");
    expect(info.cluster?.leader).toBeTruthy();
    expect(info.cluster?.replicas?.map((r) => [r.current, r.offline ?? false])).toEqual([
      [true, false],
      [true, false],
    ]);
    // The harness's own read (an ordered consumer) gets every message.
    expect((await readStream(nc, "T")).map((m) => m.subject)).toEqual(Array.from({ length: COUNT }, (_, i) => `t.${i}`));
  });
});
