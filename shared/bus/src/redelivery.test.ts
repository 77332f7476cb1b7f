import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { AckPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { z } from "zod";
import { ConflictError, UnavailableError } from "@paddock/contracts";
import { createLogger, silentLogger } from "@paddock/logging";
import { useNatsServer } from "@paddock/testing/vitest";
import { consumeTyped, createBusMetrics, DEFAULT_REDELIVERY, NEVER_PARK, redeliveryDelayMs, shouldPark, type ConsumeOptions, type Settlement } from "./index.ts";

const nats = useNatsServer();

const Schema = z.object({ n: z.number() }).strict();

/** A fresh stream and consumer with one message on it; `settled` resolves once `until` holds for the settlements seen. */
async function consumeOne(
  name: string,
  opts: Pick<ConsumeOptions<typeof Schema>, "handler" | "redelivery"> & { log?: ConsumeOptions<typeof Schema>["log"] },
  until: (seen: Settlement[]) => boolean,
) {
  const jsm = await jetstreamManager(nats.nc);
  await jsm.streams.add({ name, subjects: [`${name.toLowerCase()}.>`] });
  await jsm.consumers.add(name, { durable_name: "c", ack_policy: AckPolicy.Explicit });
  const js = jetstream(nats.nc);
  const metrics = createBusMetrics();
  const seen: Settlement[] = [];
  let resolve!: () => void;
  const settled = new Promise<void>((r) => (resolve = r));
  const handle = await consumeTyped(js, {
    stream: name,
    consumer: "c",
    schema: Schema,
    metrics,
    log: opts.log ?? silentLogger(),
    handler: opts.handler,
    ...(opts.redelivery ? { redelivery: opts.redelivery } : {}),
    onSettled: (_msg: JsMsg, s: Settlement) => {
      seen.push(s);
      if (until(seen)) resolve();
    },
  });
  const ack = await js.publish(`${name.toLowerCase()}.x`, JSON.stringify({ n: 1 }));
  return { seen, settled, metrics, handle, seq: ack.seq };
}

const count = async (c: { get(): Promise<{ values: Array<{ value: number }> }> }) => (await c.get()).values.reduce((sum, v) => sum + v.value, 0);

describe("redelivery policy", () => {
  it("waits 500 ms after the first failure, doubles per delivery up to 30 s, and parks at the 20th delivery", () => {
    const delays = Array.from({ length: 9 }, (_, i) => redeliveryDelayMs(new Error("x"), i + 1, DEFAULT_REDELIVERY));
    expect(delays).toEqual([500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
    expect(redeliveryDelayMs(new Error("x"), 1_000_000, DEFAULT_REDELIVERY)).toBe(30_000);
    expect([shouldPark(19, DEFAULT_REDELIVERY), shouldPark(20, DEFAULT_REDELIVERY)]).toEqual([false, true]);
    expect(shouldPark(1_000_000, { ...DEFAULT_REDELIVERY, maxDeliveries: Number.POSITIVE_INFINITY })).toBe(false);
  });
});

describe("a typed consumer whose handler fails", () => {
  it("naks with a delay that grows with the delivery count, then parks the message at the bound, logs its sequence and counts it", async () => {
    const lines: string[] = [];
    const destination = new Writable({ write: (chunk: Buffer, _enc, done) => (lines.push(chunk.toString()), done()) });
    let calls = 0;
    const { seen, settled, metrics, handle, seq } = await consumeOne(
      "REDELIVER",
      {
        log: createLogger({ service: "test", level: "error", destination }),
        redelivery: { baseMs: 1, capMs: 4, maxDeliveries: 5 },
        handler: async () => {
          calls++;
          throw new Error("always fails", { cause: new Error("root cause") });
        },
      },
      (s) => s.some((x) => x.outcome === "parked"),
    );
    await settled;
    expect(seen).toEqual([
      { outcome: "nak", delayMs: 1, deliveryCount: 1 },
      { outcome: "nak", delayMs: 2, deliveryCount: 2 },
      { outcome: "nak", delayMs: 4, deliveryCount: 3 },
      { outcome: "nak", delayMs: 4, deliveryCount: 4 },
      { outcome: "parked", deliveryCount: 5 },
    ]);
    expect(calls).toBe(5);
    expect(await count(metrics.redeliveries)).toBe(4);
    expect(await count(metrics.parkedMessages)).toBe(1);
    const parked = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === "message parked: it kept failing");
    expect(parked).toMatchObject({ stream: "REDELIVER", consumer: "c", seq, deliveryCount: 5 });
    // The handler's error is logged with the error it wraps.
    expect(JSON.stringify(parked?.err)).toContain("root cause");
    await handle.stop();
  });

  it("waits as long as a retryable error asks, whatever the delivery count", async () => {
    let calls = 0;
    const { seen, settled, handle } = await consumeOne(
      "RETRYAFTER",
      {
        redelivery: { baseMs: 1, capMs: 4, maxDeliveries: 5 },
        handler: async () => {
          if (++calls < 3) throw new UnavailableError("not yet", { retryAfterMs: 25 * calls });
        },
      },
      (s) => s.some((x) => x.outcome === "ack"),
    );
    await settled;
    expect(seen).toEqual([
      { outcome: "nak", delayMs: 25, deliveryCount: 1 },
      { outcome: "nak", delayMs: 50, deliveryCount: 2 },
      { outcome: "ack" },
    ]);
    await handle.stop();
  });

  it("never parks for a consumer that must not drop a message (NEVER_PARK): it keeps trying past the default bound", async () => {
    const failures = DEFAULT_REDELIVERY.maxDeliveries + 1;
    let calls = 0;
    const { seen, settled, metrics, handle } = await consumeOne(
      "NEVERPARK",
      {
        redelivery: { ...NEVER_PARK, baseMs: 1, capMs: 1 },
        handler: async () => {
          if (++calls <= failures) throw new UnavailableError("store not answering");
        },
      },
      (s) => s.some((x) => x.outcome === "ack" || x.outcome === "parked"),
    );
    await settled;
    expect(seen.at(-1)).toEqual({ outcome: "ack" });
    expect(seen.filter((x) => x.outcome === "nak")).toHaveLength(failures);
    expect(await count(metrics.parkedMessages)).toBe(0);
    await handle.stop();
  });

  it("terminates a non-retryable error at once, without a redelivery", async () => {
    let calls = 0;
    const { seen, settled, metrics, handle } = await consumeOne(
      "TERMINAL",
      {
        handler: async () => {
          calls++;
          throw new ConflictError("never", { cause: new Error("why") });
        },
      },
      (s) => s.length === 1,
    );
    await settled;
    expect(seen).toEqual([{ outcome: "term", reason: "terminal" }]);
    expect(calls).toBe(1);
    expect(await count(metrics.redeliveries)).toBe(0);
    expect(await count(metrics.parkedMessages)).toBe(0);
    await handle.stop();
  });
});
