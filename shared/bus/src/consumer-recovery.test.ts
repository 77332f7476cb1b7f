import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { z } from "zod";
import { UnavailableError } from "@paddock/contracts";
import { silentLogger } from "@paddock/logging";
import { startNatsServer, type NatsServerHandle } from "@paddock/testing";
import { consumeTyped, createBusMetrics, SettledFloor } from "./index.ts";

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

describe("settled floor", () => {
  it("stays below the lowest message still open and follows the highest settled otherwise", () => {
    const floor = new SettledFloor(10);
    expect(floor.value()).toBe(10);
    floor.delivered(11);
    floor.delivered(12);
    expect(floor.value()).toBe(10);
    floor.settled(12);
    // 11 is still open (in hand, or nak'ed): a consumer made again must deliver it.
    expect(floor.value()).toBe(10);
    floor.settled(11);
    expect(floor.value()).toBe(12);
    floor.delivered(13);
    floor.delivered(14);
    floor.settled(14);
    expect(floor.value()).toBe(12);
  });
});

describe("a memory-backed consumer the server lost", () => {
  it("is made again from the settled floor: a nak'ed message comes back, one published meanwhile arrives, none before the floor", async () => {
    const jsm = await jetstreamManager(nc);
    const js = jetstream(nc);
    await jsm.streams.add({ name: "TESTR", subjects: ["testr.>"] });
    await js.publish("testr.x", JSON.stringify({ n: 0 }));
    const config = (start: { afterSeq: number } | "new") => ({
      durable_name: "r",
      ack_policy: AckPolicy.Explicit,
      mem_storage: true,
      ...(start === "new" ? { deliver_policy: DeliverPolicy.New } : { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: start.afterSeq + 1 }),
    });
    const created = await jsm.consumers.add("TESTR", config("new"));
    const recreatedFrom: number[] = [];
    const handled: number[] = [];
    let failedOnce = false;
    const waiters: Array<{ until: () => boolean; resolve: () => void }> = [];
    const when = (until: () => boolean) => new Promise<void>((resolve) => waiters.push({ until, resolve }));
    const handle = await consumeTyped(js, {
      stream: "TESTR",
      consumer: "r",
      schema: z.object({ n: z.number() }).strict(),
      metrics: createBusMetrics(),
      log: silentLogger(),
      // Far longer than the test: only the consumer made again can hand the nak'ed message back.
      retryDelayMs: 3_600_000,
      recovery: {
        floor: created.delivered.stream_seq,
        create: async (settledThrough) => {
          recreatedFrom.push(settledThrough);
          await jsm.consumers.add("TESTR", config({ afterSeq: settledThrough }));
        },
      },
      handler: async ({ n }) => {
        if (n === 2 && !failedOnce) {
          failedOnce = true;
          for (const w of waiters) if (w.until()) w.resolve();
          throw new UnavailableError("not yet");
        }
        handled.push(n);
        for (const w of waiters) if (w.until()) w.resolve();
      },
    });
    const firstRound = when(() => failedOnce && handled.includes(1) && handled.includes(3));
    for (const n of [1, 2, 3]) await js.publish("testr.x", JSON.stringify({ n }));
    await firstRound;
    // What a broker restart does to a memory-backed consumer.
    await jsm.consumers.delete("TESTR", "r");
    const recovered = when(() => handled.includes(2) && handled.includes(4));
    await js.publish("testr.x", JSON.stringify({ n: 4 }));
    await recovered;
    // Stream sequences: n0 = 1, n1 = 2, n2 = 3 (nak'ed, open), n3 = 4: everything through 2 was settled.
    expect(recreatedFrom[0]).toBe(2);
    expect(handled).not.toContain(0);
    expect(handled.filter((n) => n === 1)).toHaveLength(1);
    expect(handled.filter((n) => n === 2)).toHaveLength(1);
    expect((await jsm.consumers.info("TESTR", "r")).config.mem_storage).toBe(true);
    await handle.stop();
  });
});
