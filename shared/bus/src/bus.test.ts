import { describe, expect, it } from "vitest";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type StreamUpdateConfig } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { z } from "zod";
import { Buckets, InvalidError, NotFoundError, packWithBytes, Streams, UnavailableError, unpackWithBytes, type Rpc } from "@paddock/contracts";
import { silentLogger } from "@paddock/logging";
import { useNatsServer } from "@paddock/testing/vitest";
import {
  callRpc,
  callRpcWithBytes,
  connectBus,
  consumeTyped,
  createBusMetrics,
  decodeJson,
  encodeJson,
  encoderOf,
  encodeUnchecked,
  isWrongLastSequence,
  provision,
  readLatestFromLeader,
  serveRpc,
  serveRpcWithBytes,
  SettledFloor,
  streamConfigs,
  MAX_CONSUMERS_PER_STREAM,
} from "./index.ts";

const nats = useNatsServer();

describe("provision", () => {
  it("is idempotent when several replicas run it at once", async () => {
    await Promise.all([provision(nats.nc, { replicas: 1 }), provision(nats.nc, { replicas: 1 }), provision(nats.nc, { replicas: 1 })]);
    await provision(nats.nc, { replicas: 1 });
    const jsm = await jetstreamManager(nats.nc);
    for (const cfg of streamConfigs({ replicas: 1 })) {
      const info = await jsm.streams.info(cfg.name);
      expect(info.config.subjects).toEqual(cfg.subjects);
    }
    const kv = await new Kvm(nats.nc).open(Buckets.sessions);
    // Deeper than the KV client's cap of 64: the change feed must not drop revisions of a busy record.
    expect((await kv.status()).history).toBe(1024);
  });

  it("updates a stream whose config drifted", async () => {
    const jsm = await jetstreamManager(nats.nc);
    const twoHoursNs = 2 * 3_600_000 * 1_000_000;
    await jsm.streams.update(Streams.audit, { max_age: twoHoursNs });
    await provision(nats.nc, { replicas: 1, auditMaxAgeMs: 3 * 3_600_000 });
    expect((await jsm.streams.info(Streams.audit)).config.max_age).toBe(3 * 3_600_000 * 1_000_000);
    // A service that does not set audit retention leaves it alone.
    await provision(nats.nc, { replicas: 1 });
    expect((await jsm.streams.info(Streams.audit)).config.max_age).toBe(3 * 3_600_000 * 1_000_000);
  });

  it("lets a stream hold more consumers than the server's default of 1,000 (one per runner on DISPATCH), raising a stream made without the bound", async () => {
    const jsm = await jetstreamManager(nats.nc);
    // As a deployment provisioned before the bound: the server's own default applies (the client's
    // update type omits the field, which the server has accepted since 2.12).
    await jsm.streams.update(Streams.dispatch, { max_consumers: 1_000 } as Partial<StreamUpdateConfig>);
    await provision(nats.nc, { replicas: 1 });
    expect((await jsm.streams.info(Streams.dispatch)).config.max_consumers).toBe(MAX_CONSUMERS_PER_STREAM);
    const names = Array.from({ length: 1_050 }, (_, i) => `many-${i}`);
    try {
      for (const name of names) {
        await jsm.consumers.add(Streams.dispatch, { durable_name: name, filter_subject: `paddock.dispatch.many.${name}`, ack_policy: AckPolicy.Explicit, mem_storage: true });
      }
      expect((await jsm.streams.info(Streams.dispatch)).state.consumer_count).toBeGreaterThanOrEqual(names.length);
    } finally {
      await Promise.all(names.map((name) => jsm.consumers.delete(Streams.dispatch, name).catch(() => false)));
    }
  });

  it("reports a lost KV compare-and-set as wrong-last-sequence", async () => {
    const kv = await new Kvm(nats.nc).open(Buckets.names);
    const rev = await kv.create("ws.cas", "a");
    await kv.update("ws.cas", "b", rev);
    const lost = await kv.update("ws.cas", "c", rev).catch((e: unknown) => e);
    expect(isWrongLastSequence(lost)).toBe(true);
    const dup = await kv.create("ws.cas", "d").catch((e: unknown) => e);
    expect(isWrongLastSequence(dup)).toBe(true);
  });
});

describe("rpc", () => {
  const Echo: Rpc<z.ZodObject<{ n: z.ZodNumber }>, z.ZodObject<{ doubled: z.ZodNumber }>> = {
    subject: "paddock.test.echo",
    request: z.object({ n: z.number() }).strict(),
    result: z.object({ doubled: z.number() }).strict(),
  };

  it("validates requests at the boundary and maps typed errors", async () => {
    const metrics = createBusMetrics();
    const sub = serveRpc(
      nats.nc,
      Echo,
      async ({ n }) => {
        if (n < 0) throw new NotFoundError("number");
        if (n === 13) throw new Error("raw internal detail");
        return { doubled: n * 2 };
      },
      { queue: "test", metrics, log: silentLogger() },
    );
    expect(await callRpc(nats.nc, Echo, { n: 21 })).toEqual({ doubled: 42 });
    await expect(callRpc(nats.nc, Echo, { n: -1 })).rejects.toMatchObject({ code: "not_found" });
    const internal = (await callRpc(nats.nc, Echo, { n: 13 }).catch((e: unknown) => e)) as Error;
    expect(internal).toMatchObject({ code: "internal" });
    expect(internal.message).not.toContain("raw internal detail");
    // A malformed request from a foreign client: answered invalid, counted, server alive.
    const reply = await nats.nc.request(Echo.subject, new TextEncoder().encode('{"n":"x","extra":1}'));
    expect(reply.json()).toMatchObject({ ok: false, error: { code: "invalid" } });
    expect((await metrics.invalidMessages.get()).values[0]?.value).toBe(1);
    expect(await callRpc(nats.nc, Echo, { n: 1 })).toEqual({ doubled: 2 });
    sub.unsubscribe();
    const noAnswer = await callRpc(nats.nc, Echo, { n: 1 }, { timeoutMs: 500 }).catch((e: unknown) => e);
    expect(noAnswer).toBeInstanceOf(UnavailableError);
    // The client's own error stays as the cause, for logs.
    expect((noAnswer as Error).cause).toBeInstanceOf(Error);
  });

  it("carries raw bytes after the JSON both ways for a withBytes rpc, and answers a message that is not packed invalid", async () => {
    const Reverse = { subject: "paddock.test.reverse", request: z.object({ tag: z.string() }).strict(), result: z.object({ tag: z.string(), got: z.number() }).strict(), withBytes: true as const };
    const metrics = createBusMetrics();
    const sub = serveRpcWithBytes(
      nats.nc,
      Reverse,
      async ({ tag }, bytes) => {
        if (tag === "refuse") throw new InvalidError("refused");
        return { result: { tag, got: bytes.byteLength }, bytes: Uint8Array.from(bytes).reverse() };
      },
      { queue: "test", metrics, log: silentLogger() },
    );
    const bytes = Uint8Array.from({ length: 300_000 }, (_, i) => (i * 31) & 0xff);
    const answer = await callRpcWithBytes(nats.nc, Reverse, { tag: "a" }, bytes);
    expect(answer.result).toEqual({ tag: "a", got: 300_000 });
    expect(Buffer.from(answer.bytes).equals(Buffer.from(Uint8Array.from(bytes).reverse()))).toBe(true);
    expect((await callRpcWithBytes(nats.nc, Reverse, { tag: "" }, new Uint8Array(0))).bytes.byteLength).toBe(0);
    await expect(callRpcWithBytes(nats.nc, Reverse, { tag: "refuse" }, bytes)).rejects.toMatchObject({ code: "invalid" });
    // Foreign clients: plain JSON, a length past the end, three bytes; each answered invalid, packed, counted.
    for (const data of [new TextEncoder().encode('{"tag":"x"}'), Uint8Array.of(255, 255, 0, 0, 123), Uint8Array.of(1, 2, 3)]) {
      const packed = unpackWithBytes((await nats.nc.request(Reverse.subject, data)).data);
      expect(JSON.parse(new TextDecoder().decode(packed?.json))).toMatchObject({ ok: false, error: { code: "invalid" } });
    }
    expect((await metrics.invalidMessages.get()).values[0]?.value).toBe(3);
    // JSON that breaks the request's schema, packed: invalid too.
    const bad = unpackWithBytes((await nats.nc.request(Reverse.subject, packWithBytes(new TextEncoder().encode('{"tag":1}'), Uint8Array.of(1)))).data);
    expect(JSON.parse(new TextDecoder().decode(bad?.json))).toMatchObject({ ok: false, error: { code: "invalid" } });
    sub.unsubscribe();
  });

  it("a request that cannot be encoded is the caller's invalid, not a retryable unavailable, and is never sent", async () => {
    let served = 0;
    const sub = nats.nc.subscribe(Echo.subject, {
      callback: () => {
        served += 1;
      },
    });
    await expect(callRpc(nats.nc, Echo, { n: "x" } as never)).rejects.toMatchObject({ code: "invalid" });
    const unchecked = await connectBus({ servers: nats.url, name: "unchecked", validateOutgoing: false });
    try {
      // Unchecked, an unencodable value still fails locally (a BigInt here; a value nested past the stack alike).
      await expect(callRpc(unchecked, Echo, { n: 1n } as never)).rejects.toMatchObject({ code: "invalid" });
      await unchecked.flush();
    } finally {
      await unchecked.close();
    }
    await nats.nc.flush();
    expect(served).toBe(0);
    sub.unsubscribe();
  });

  it("outgoing validation is an option of each bus: one refuses a message that breaks its contract, the other sends it to the receiver", async () => {
    const received: unknown[] = [];
    // The receiver refuses what does not parse, as serveRpc does; it records what reached it.
    const sub = nats.nc.subscribe(Echo.subject, {
      callback: (_err, msg) => {
        received.push(msg.json());
        msg.respond(new TextEncoder().encode(JSON.stringify({ ok: false, error: { code: "invalid", message: "refused by the receiver" } })));
      },
    });
    await nats.nc.flush();
    const checking = await connectBus({ servers: nats.url, name: "checking", validateOutgoing: true });
    const unchecked = await connectBus({ servers: nats.url, name: "unchecked", validateOutgoing: false });
    try {
      const refused = await callRpc(checking, Echo, { n: "x" } as never).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(InvalidError);
      expect((refused as Error).message).toMatch(/^outgoing message breaks its contract/);
      await checking.flush();
      expect(received).toEqual([]);

      const answered = await callRpc(unchecked, Echo, { n: "x" } as never).catch((e: unknown) => e);
      // The receiver's own typed answer: the message was sent.
      expect(answered).toMatchObject({ code: "invalid", message: "refused by the receiver" });
      expect(received).toEqual([{ n: "x" }]);
      // The same holds for the encoder each bus hands its senders (KV writes, publishes).
      expect(() => encoderOf(checking)(Echo.request, { n: "x" } as never)).toThrow(InvalidError);
      expect(decodeJson(Echo.request, encoderOf(unchecked)(Echo.request, { n: "x" } as never))).toMatchObject({ ok: false });
    } finally {
      sub.unsubscribe();
      await checking.close();
      await unchecked.close();
    }
  });

  it("refuses to publish a message that breaks its contract", () => {
    expect(() => encodeJson(Echo.request, { n: "x" } as never)).toThrow(InvalidError);
    // A connection not made by connectBus (a test's own) checks what it sends.
    expect(() => encoderOf(nats.nc)(Echo.request, { n: "x" } as never)).toThrow(InvalidError);
  });

  it("unchecked, leaves the check to the receiver, which still refuses the message", () => {
    const bytes = encodeUnchecked(Echo.request, { n: "x" } as never);
    expect(decodeJson(Echo.request, bytes)).toMatchObject({ ok: false });
    expect(decodeJson(Echo.request, encodeUnchecked(Echo.request, { n: 2 }))).toEqual({ ok: true, value: { n: 2 } });
  });
});

describe("typed consumer", () => {
  it("terminates invalid messages, counts them, and keeps consuming", async () => {
    const { consumeTyped } = await import("./consume.ts");
    const jsm = await jetstreamManager(nats.nc);
    await jsm.streams.add({ name: "TESTC", subjects: ["testc.>"] });
    await jsm.consumers.add("TESTC", { durable_name: "c", ack_policy: "explicit" as never });
    const js = jetstream(nats.nc);
    const metrics = createBusMetrics();
    const seen: number[] = [];
    let resolveTwo!: () => void;
    const two = new Promise<void>((r) => (resolveTwo = r));
    const handle = await consumeTyped(js, {
      stream: "TESTC",
      consumer: "c",
      schema: z.object({ n: z.number() }).strict(),
      metrics,
      log: silentLogger(),
      handler: async ({ n }) => {
        seen.push(n);
        if (seen.length === 2) resolveTwo();
      },
    });
    await js.publish("testc.a", '{"n":1}');
    await js.publish("testc.a", "not json");
    await js.publish("testc.a", '{"n":"wrong"}');
    await js.publish("testc.a", '{"n":2}');
    await two;
    expect(seen).toEqual([1, 2]);
    expect((await metrics.invalidMessages.get()).values[0]?.value).toBe(2);
    await handle.stop();
  });
});

describe("typed consumer in lanes", () => {
  it("handles different keys concurrently and one key strictly in order", async () => {
    const { consumeTyped } = await import("./consume.ts");
    const jsm = await jetstreamManager(nats.nc);
    await jsm.streams.add({ name: "TESTL", subjects: ["testl.>"] });
    await jsm.consumers.add("TESTL", { durable_name: "l", ack_policy: "explicit" as never });
    const js = jetstream(nats.nc);
    const order: Record<string, number[]> = { a: [], b: [] };
    let active = 0;
    let maxActive = 0;
    let released!: () => void;
    const gate = new Promise<void>((r) => (released = r));
    let finished!: () => void;
    const allDone = new Promise<void>((r) => (finished = r));
    let count = 0;
    const handle = await consumeTyped(js, {
      stream: "TESTL",
      consumer: "l",
      schema: z.object({ key: z.string(), n: z.number() }).strict(),
      metrics: createBusMetrics(),
      log: silentLogger(),
      lanes: { concurrency: 8, keyOf: (m) => (m.json() as { key: string }).key },
      handler: async ({ key, n }) => {
        active++;
        maxActive = Math.max(maxActive, active);
        // The first message of each key waits until both keys are in flight at once.
        if (n === 0) {
          if (maxActive >= 2) released();
          await gate;
        }
        order[key]?.push(n);
        active--;
        if (++count === 10) finished();
      },
    });
    for (let n = 0; n < 5; n++) {
      await js.publish("testl.x", JSON.stringify({ key: "a", n }));
      await js.publish("testl.x", JSON.stringify({ key: "b", n }));
    }
    await allDone;
    expect(maxActive).toBeGreaterThanOrEqual(2);
    expect(order).toEqual({ a: [0, 1, 2, 3, 4], b: [0, 1, 2, 3, 4] });
    await handle.stop();
  });
});

describe("reading a KV key from its stream's leader", () => {
  it("answers the latest value with the revision a compare-and-set names, and nothing for a missing or deleted key", async () => {
    const kv = await new Kvm(nats.nc).create("leader-read", { history: 4 });
    const jsm = await jetstreamManager(nats.nc);
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
    const jsm = await jetstreamManager(nats.nc);
    const js = jetstream(nats.nc);
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
      redelivery: { baseMs: 3_600_000, capMs: 3_600_000 },
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
