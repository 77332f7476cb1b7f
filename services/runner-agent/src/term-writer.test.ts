import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { connect, headers as natsHeaders, type NatsConnection } from "@nats-io/transport-node";
import { Headers, Streams, Subjects } from "@paddock/contracts";
import { provision } from "@paddock/bus";
import { silentLogger } from "@paddock/logging";
import { startNatsServer, type NatsServerHandle } from "@paddock/testing";
import { createRunnerMetrics, type RunnerMetrics } from "./metrics.ts";
import { MAX_CHUNK_BYTES, TermWriter } from "./term-writer.ts";
import { counterValue } from "./test-support.ts";

let server: NatsServerHandle;
let nc: NatsConnection;
let js: JetStreamClient;
let jsm: JetStreamManager;

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url });
  await provision(nc, { replicas: 1 });
  js = jetstream(nc);
  jsm = await jetstreamManager(nc);
});
afterAll(async () => {
  await nc.drain();
  await server.stop();
});

function writer(sessionId: string, placementGeneration: number, metrics: RunnerMetrics, app = "main"): TermWriter {
  return new TermWriter({ js, jsm, sessionId, app, placementGeneration, metrics, log: silentLogger() });
}

interface Stored {
  body: Buffer;
  generation: string | undefined;
  exitCode: string | undefined;
}

/** Every message stored on one TERM subject, in order. */
async function readSubject(subject: string): Promise<Stored[]> {
  const info = await jsm.streams.info(Streams.term, { subjects_filter: subject });
  const count = info.state.subjects?.[subject] ?? 0;
  if (count === 0) return [];
  const consumer = await js.consumers.get(Streams.term, { filter_subjects: [subject] });
  const out: Stored[] = [];
  const messages = await consumer.fetch({ max_messages: count, expires: 10_000 });
  for await (const m of messages) {
    out.push({
      body: Buffer.from(m.data),
      generation: m.headers?.get(Headers.placementGeneration),
      exitCode: m.headers?.has(Headers.exitCode) ? m.headers.get(Headers.exitCode) : undefined,
    });
    if (out.length === count) break;
  }
  return out;
}

const text = (s: string) => new TextEncoder().encode(s);

describe("term writer fencing", () => {
  it("latches shut once a successor generation has written, and never blocks close", async () => {
    const metrics = createRunnerMetrics();
    const old = writer("fence1", 1, metrics);
    const successor = writer("fence1", 2, metrics);
    old.append(text("a"));
    await old.flush();
    successor.append(text("b"));
    await successor.flush();

    old.append(text("c"));
    await old.flush();
    expect(old.fenced).toBe(true);
    expect(await counterValue(metrics.termFenced)).toBe(1);
    old.append(text("d"));
    await old.flush();
    await old.finish(0);

    successor.append(text("e"));
    await successor.finish(0);
    expect(successor.fenced).toBe(false);
    const stored = await readSubject(Subjects.term("fence1", "main"));
    expect(stored.map((m) => [m.body.toString(), m.generation, m.exitCode])).toEqual([
      ["a", "1", undefined],
      ["b", "2", undefined],
      ["e", "2", undefined],
      ["", "2", "0"],
    ]);
    expect(await counterValue(metrics.termFenced)).toBe(1);
  });

  it("continues after the existing log of the subject and steps over a predecessor's late write", async () => {
    const metrics = createRunnerMetrics();
    const first = writer("fence2", 3, metrics);
    first.append(text("x"));
    await first.flush();
    // A predecessor (generation 2) lands a chunk behind the successor's back.
    const h = natsHeaders();
    h.set(Headers.placementGeneration, "2");
    await js.publish(Subjects.term("fence2", "main"), text("late"), { headers: h });
    first.append(text("y"));
    await first.flush();
    expect(first.fenced).toBe(false);
    // A later writer of the same generation line starts from the subject's last sequence.
    const next = writer("fence2", 4, metrics);
    next.append(text("z"));
    await next.finish(null);
    const stored = await readSubject(Subjects.term("fence2", "main"));
    expect(stored.map((m) => [m.body.toString(), m.generation, m.exitCode])).toEqual([
      ["x", "3", undefined],
      ["late", "2", undefined],
      ["y", "3", undefined],
      ["z", "4", undefined],
      ["", "4", ""],
    ]);
    expect(await counterValue(metrics.termFenced)).toBe(0);
  });

  it("coalesces a burst into chunks of at most 32 KiB, bytes intact and in order", async () => {
    const metrics = createRunnerMetrics();
    const w = writer("burst", 1, metrics);
    const parts: Buffer[] = [];
    for (let i = 0; i < 200; i++) parts.push(Buffer.alloc(10_000, i % 251));
    parts.push(Buffer.alloc(100 * 1024, 7)); // one buffer larger than a chunk is split
    for (const p of parts) w.append(p);
    await w.flush();
    const stored = await readSubject(Subjects.term("burst", "main"));
    const total = parts.reduce((n, p) => n + p.byteLength, 0);
    expect(stored.every((m) => m.body.byteLength <= MAX_CHUNK_BYTES)).toBe(true);
    expect(Buffer.concat(stored.map((m) => m.body)).equals(Buffer.concat(parts))).toBe(true);
    // The first publish takes what was there; everything after is coalesced into full chunks.
    expect(stored.length).toBeLessThanOrEqual(1 + Math.ceil((total - 10_000) / MAX_CHUNK_BYTES));
    expect(w.committed).toBe(stored.length);
  });
});
