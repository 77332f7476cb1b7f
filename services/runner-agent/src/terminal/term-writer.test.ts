import { beforeAll, describe, expect, it } from "vitest";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { connect, headers as natsHeaders } from "@nats-io/transport-node";
import { Headers, parseTermSubject, Streams, Subjects, TERM_CHUNK_MAX_BYTES } from "@paddock/contracts";
import { provision } from "@paddock/bus";
import { silentLogger } from "@paddock/logging";
import { startNatsServer } from "@paddock/testing";
import { useNatsServer } from "@paddock/testing/vitest";
import { createRunnerMetrics, type RunnerMetrics } from "../metrics.ts";
import { TermWriter } from "./term-writer.ts";
import { counterValue } from "../testing/test-support.ts";

const nats = useNatsServer();
let js: JetStreamClient;
let jsm: JetStreamManager;

beforeAll(async () => {
  await provision(nats.nc, { replicas: 1 });
  js = jetstream(nats.nc);
  jsm = await jetstreamManager(nats.nc);
});

interface Who {
  poolId: string;
  runnerId: string;
}
const R1: Who = { poolId: "p", runnerId: "r1" };
const R2: Who = { poolId: "p", runnerId: "r2" };

/**
 * A writer whose placement checks are answered by `current` (in the service
 * the scheduler answers from the session record; see runner-rpc tests), and
 * counted.
 */
function writer(who: Who, sessionId: string, placementGeneration: number, metrics: RunnerMetrics, current: () => boolean = () => true) {
  const asked = { count: 0 };
  const w = new TermWriter({
    js,
    jsm,
    ...who,
    sessionId,
    app: "main",
    placementGeneration,
    metrics,
    log: silentLogger(),
    isCurrentPlacement: () => {
      asked.count += 1;
      return Promise.resolve(current());
    },
  });
  return Object.assign(w, { asked });
}

interface Stored {
  runner: string | undefined;
  body: Buffer;
  generation: string | undefined;
  exitCode: string | undefined;
  size: string | undefined;
}

/** Every message of one app's log, whichever runner wrote it, in order. */
async function readLog(sessionId: string): Promise<Stored[]> {
  const consumer = await js.consumers.get(Streams.term, { filter_subjects: [Subjects.termOfApp(sessionId, "main")] });
  const count = (await consumer.info()).num_pending;
  if (count === 0) return [];
  const out: Stored[] = [];
  const messages = await consumer.fetch({ max_messages: count, expires: 10_000 });
  for await (const m of messages) {
    out.push({
      runner: parseTermSubject(m.subject)?.runnerId,
      body: Buffer.from(m.data),
      generation: m.headers?.get(Headers.placementGeneration),
      exitCode: m.headers?.has(Headers.exitCode) ? m.headers.get(Headers.exitCode) : undefined,
      size: m.headers?.has(Headers.terminalSize) ? m.headers.get(Headers.terminalSize) : undefined,
    });
    if (out.length === count) break;
  }
  return out;
}

const text = (s: string) => new TextEncoder().encode(s);
const rows = (stored: Stored[]) => stored.map((m) => [m.runner, m.body.toString(), m.generation, m.exitCode]);

describe("term writer fencing", () => {
  it("a successor on another runner steps over the predecessor's log; the predecessor latches shut on its next chunk", async () => {
    const metrics = createRunnerMetrics();
    let placed = 1;
    const old = writer(R1, "fence1", 1, metrics, () => placed === 1);
    old.append(text("a"));
    await old.flush();
    placed = 2;
    const successor = writer(R2, "fence1", 2, metrics, () => placed === 2);
    successor.append(text("b"));
    await successor.flush();
    expect(successor.asked.count).toBe(1); // its own subject was empty: the record decided

    old.append(text("c"));
    await old.flush();
    expect(old.fenced).toBe(true);
    expect(old.asked.count).toBe(1);
    expect(await counterValue(metrics.termFenced)).toBe(1);
    old.append(text("d"));
    await old.flush();
    await old.finish(0);

    successor.append(text("e"));
    await successor.finish(0);
    expect(successor.fenced).toBe(false);
    expect(rows(await readLog("fence1"))).toEqual([
      ["r1", "a", "1", undefined],
      ["r2", "b", "2", undefined],
      ["r2", "e", "2", undefined],
      ["r2", "", "2", "0"],
    ]);
    expect(await counterValue(metrics.termFenced)).toBe(1);
  });

  it("on the same runner the log's own headers settle it: no question to the record", async () => {
    const metrics = createRunnerMetrics();
    const old = writer(R1, "fence-same", 1, metrics, () => false);
    old.append(text("a"));
    await old.flush();
    const successor = writer(R1, "fence-same", 2, metrics);
    successor.append(text("b"));
    await successor.flush();
    old.append(text("c"));
    await old.flush();
    expect(old.fenced).toBe(true);
    expect(old.asked.count + successor.asked.count).toBe(0);
    expect(rows(await readLog("fence-same"))).toEqual([
      ["r1", "a", "1", undefined],
      ["r1", "b", "2", undefined],
    ]);
  });

  it("steps over a predecessor's late write on another runner's subject", async () => {
    const metrics = createRunnerMetrics();
    const first = writer(R2, "fence2", 3, metrics);
    first.append(text("x"));
    await first.flush();
    // A predecessor (generation 2, on r1) lands a chunk behind the successor's back.
    const h = natsHeaders();
    h.set(Headers.placementGeneration, "2");
    await js.publish(Subjects.term(R1.poolId, R1.runnerId, "fence2", "main"), text("late"), { headers: h });
    first.append(text("y"));
    await first.flush();
    expect(first.fenced).toBe(false);
    // A later placement on the same runner starts from its own subject's last sequence.
    const next = writer(R2, "fence2", 4, metrics);
    next.append(text("z"));
    await next.finish(null);
    expect(rows(await readLog("fence2"))).toEqual([
      ["r2", "x", "3", undefined],
      ["r1", "late", "2", undefined],
      ["r2", "y", "3", undefined],
      ["r2", "z", "4", undefined],
      ["r2", "", "4", ""],
    ]);
    expect(await counterValue(metrics.termFenced)).toBe(0);
  });

  it("a chunk forged under another runner's subject with the current generation cannot latch the placed writer", async () => {
    const metrics = createRunnerMetrics();
    const legit = writer(R2, "forged", 5, metrics);
    legit.append(text("mine"));
    await legit.flush();
    const h = natsHeaders();
    h.set(Headers.placementGeneration, "5");
    await js.publish(Subjects.term(R1.poolId, R1.runnerId, "forged", "main"), text("forged"), { headers: h });
    legit.append(text("still mine"));
    await legit.flush();
    expect(legit.fenced).toBe(false);
    expect(rows(await readLog("forged")).filter((r) => r[0] === "r2").map((r) => r[1])).toEqual(["mine", "still mine"]);
  });

  it("retries a chunk while the record cannot be asked, then commits it", async () => {
    const metrics = createRunnerMetrics();
    const predecessor = writer(R1, "unasked", 1, metrics);
    predecessor.append(text("old"));
    await predecessor.flush();
    let failures = 2;
    const w = new TermWriter({
      js,
      jsm,
      ...R2,
      sessionId: "unasked",
      app: "main",
      placementGeneration: 2,
      metrics,
      log: silentLogger(),
      retryDelayMs: 1,
      isCurrentPlacement: () => (failures-- > 0 ? Promise.reject(new Error("no responders")) : Promise.resolve(true)),
    });
    w.append(text("new"));
    await w.flush();
    expect(w.fenced).toBe(false);
    expect(await counterValue(metrics.termRetries)).toBeGreaterThanOrEqual(2);
    expect(rows(await readLog("unasked")).map((r) => r[1])).toEqual(["old", "new"]);
  });

  it("coalesces a burst into chunks of at most TERM_CHUNK_MAX_BYTES, bytes intact and in order", async () => {
    const metrics = createRunnerMetrics();
    const w = writer(R1, "burst", 1, metrics);
    const parts: Buffer[] = [];
    for (let i = 0; i < 200; i++) parts.push(Buffer.alloc(10_000, i % 251));
    parts.push(Buffer.alloc(2 * TERM_CHUNK_MAX_BYTES + 100, 7)); // one buffer larger than a chunk is split
    for (const p of parts) w.append(p);
    await w.flush();
    const stored = await readLog("burst");
    const total = parts.reduce((n, p) => n + p.byteLength, 0);
    expect(stored.every((m) => m.body.byteLength <= TERM_CHUNK_MAX_BYTES)).toBe(true);
    expect(Buffer.concat(stored.map((m) => m.body)).equals(Buffer.concat(parts))).toBe(true);
    // The first publish takes what was there; everything after is coalesced into full chunks.
    expect(stored.length).toBeLessThanOrEqual(1 + Math.ceil((total - 10_000) / TERM_CHUNK_MAX_BYTES));
    expect(w.committed).toBe(stored.length);
  });
});

/** A clock that never moves and windows that end only when the test says so. */
function frozenClock() {
  const armed: Array<{ ms: number; fire: () => void }> = [];
  return {
    armed,
    clock: {
      now: () => 1_000,
      after: (ms: number, fn: () => void) => {
        const cancel = () => {
          const i = armed.indexOf(entry);
          if (i >= 0) armed.splice(i, 1);
        };
        const entry = {
          ms,
          fire: () => {
            cancel();
            fn();
          },
        };
        armed.push(entry);
        return cancel;
      },
    },
  };
}

/** Resolves with the TERM sequence of the n-th committed data chunk (1-based). */
function committedChunks() {
  const seqs: number[] = [];
  const waiters: Array<{ n: number; resolve: () => void }> = [];
  return {
    seqs,
    onCommitted: (seq: number) => {
      seqs.push(seq);
      for (const w of [...waiters]) if (seqs.length >= w.n) w.resolve();
    },
    until: (n: number) => (seqs.length >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve }))),
  };
}

describe("term writer coalescing (bounded in size and time)", () => {
  it("keeps every byte of more small pieces than the per-subject chunk count, arriving one by one", async () => {
    // Its own server: TERM keeps only 4 chunks per subject here.
    const own = await startNatsServer();
    const onc = await connect({ servers: own.url });
    try {
      await provision(onc, { replicas: 1, termMaxMsgsPerSubject: 4 });
      const { clock, armed } = frozenClock();
      const w = new TermWriter({
        js: jetstream(onc),
        jsm: await jetstreamManager(onc),
        ...R1,
        sessionId: "small-pieces",
        app: "main",
        placementGeneration: 1,
        metrics: createRunnerMetrics(),
        log: silentLogger(),
        isCurrentPlacement: () => Promise.resolve(true),
        maxChunkBytes: 1024,
        clock,
      });
      const pieces: Buffer[] = [];
      // 75 pieces of 40 bytes (3,000 bytes): a chunk per piece would leave only the last 4 (160 bytes).
      for (let i = 0; i < 75; i++) {
        const piece = Buffer.from(`${String(i).padStart(3, "0")}:`.padEnd(40, String.fromCharCode(97 + (i % 26))));
        pieces.push(piece);
        w.append(piece);
        // A round trip to the server between pieces: a writer that published whatever is there would have.
        await onc.flush();
      }
      expect(armed.length).toBeGreaterThan(0);
      await w.flush();
      const consumer = await jetstream(onc).consumers.get(Streams.term, { filter_subjects: [Subjects.termOfApp("small-pieces", "main")] });
      const info = await consumer.info();
      expect(info.num_pending).toBeLessThanOrEqual(4);
      const bodies: Buffer[] = [];
      for await (const m of await consumer.fetch({ max_messages: info.num_pending, expires: 10_000 })) {
        bodies.push(Buffer.from(m.data));
        if (bodies.length === info.num_pending) break;
      }
      expect(Buffer.concat(bodies).equals(Buffer.concat(pieces))).toBe(true);
      // The first piece went out at once (a new burst); the rest filled 1 KiB chunks.
      expect(bodies.map((b) => b.byteLength)).toEqual([40, 1024, 1024, 912]);
    } finally {
      await onc.close();
      await own.stop();
    }
  });

  it("holds output that keeps arriving until its window ends, and never holds output that follows input", async () => {
    const { clock, armed } = frozenClock();
    const commits = committedChunks();
    const w = new TermWriter({
      js,
      jsm,
      ...R1,
      sessionId: "window",
      app: "main",
      placementGeneration: 1,
      metrics: createRunnerMetrics(),
      log: silentLogger(),
      isCurrentPlacement: () => Promise.resolve(true),
      coalesceMs: 5,
      clock,
      onCommitted: commits.onCommitted,
    });
    w.append(text("a")); // after a quiet moment: at once
    await commits.until(1);
    w.append(text("b")); // output keeps arriving: held for the window
    // The pump finishes its turn in microtasks; any I/O callback comes after it.
    await nats.nc.flush();
    expect(armed.map((a) => a.ms)).toEqual([5]);
    armed[0]?.fire();
    await commits.until(2);
    w.append(text("c"));
    await nats.nc.flush();
    expect(armed.length).toBe(1);
    // Input reaches the app: what is pending, and what it prints next, goes out at once.
    w.noteInput();
    await commits.until(3);
    expect(armed.length).toBe(0);
    w.noteInput();
    w.append(text("d"));
    await commits.until(4);
    await w.finish(0);
    expect(rows(await readLog("window")).map((r) => [r[1], r[3]])).toEqual([
      ["a", undefined],
      ["b", undefined],
      ["c", undefined],
      ["d", undefined],
      ["", "0"],
    ]);
    expect(commits.seqs.length).toBe(4);
  });
});

describe("term writer resize markers", () => {
  it("logs a resize as an empty marker between the output before and after it, once per size, and again when a finished log reopens", async () => {
    const told: Array<[number, string]> = [];
    const w = new TermWriter({
      js,
      jsm,
      ...R1,
      sessionId: "resize",
      app: "main",
      placementGeneration: 1,
      metrics: createRunnerMetrics(),
      log: silentLogger(),
      isCurrentPlacement: () => Promise.resolve(true),
      onCommitted: (seq, body) => told.push([seq, Buffer.from(body).toString()]),
      onResized: (seq, size) => told.push([seq, `${String(size.cols)}x${String(size.rows)}`]),
    });
    expect(w.size).toEqual({ cols: 80, rows: 24 });
    w.append(text("at 80x24"));
    w.resize({ cols: 90, rows: 20 });
    // Dragging a window: resizes with no output between them leave one marker.
    w.resize({ cols: 100, rows: 30 });
    w.append(text("at 100x30"));
    // The size the log is at already: nothing to say.
    w.resize({ cols: 100, rows: 30 });
    await w.finish(0);
    // Resized while no generation runs: the log says so when the next one starts.
    w.resize({ cols: 120, rows: 40 });
    expect(w.size).toEqual({ cols: 120, rows: 40 });
    await w.flush();
    w.reopen();
    w.append(text("at 120x40"));
    await w.finish(0);
    const log = await readLog("resize");
    expect(log.map((m) => [m.body.toString(), m.size, m.exitCode])).toEqual([
      ["at 80x24", undefined, undefined],
      ["", "100x30", undefined],
      ["at 100x30", undefined, undefined],
      ["", undefined, "0"],
      ["", "120x40", undefined],
      ["at 120x40", undefined, undefined],
      ["", undefined, "0"],
    ]);
    // The screen is told of output and markers in log order, not of exit markers.
    expect(told.map((t) => t[1])).toEqual(["at 80x24", "100x30", "at 100x30", "120x40", "at 120x40"]);
    expect(told.map((t) => t[0])).toEqual([...told.map((t) => t[0])].sort((a, b) => a - b));
  });
});
