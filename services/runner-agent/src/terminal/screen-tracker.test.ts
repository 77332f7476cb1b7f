import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import type { Msg } from "@nats-io/transport-node";
import { Headers, ScreenCheckpoint, Streams, Subjects, type DispatchCommand } from "@paddock/contracts";
import { decodeJson, encodeJson, provision } from "@paddock/bus";
import { silentLogger } from "@paddock/logging";
import { useNatsServer } from "@paddock/testing/vitest";
import { createRunnerMetrics } from "../metrics.ts";
import { ScreenEmulator, screenSize } from "@paddock/screen";
import { ScreenTracker } from "./screen-tracker.ts";
import { Collector, collectTerm, counterValue, dispatchTo, fakeScheduler, testAgent, type TestAgent } from "../testing/test-support.ts";

const nats = useNatsServer();
let js: JetStreamClient;
const agents: TestAgent[] = [];

beforeAll(async () => {
  await provision(nats.nc, { replicas: 1 });
  js = jetstream(nats.nc);
});
// Before the server stops: after-all hooks run last-registered first.
afterAll(async () => {
  for (const t of agents) await t.agent.stop();
});

/** TERM sequence of the app's last chunk that is not its exit marker. */
async function lastDataChunk(sessionId: string): Promise<number> {
  const consumer = await js.consumers.get(Streams.term, { filter_subjects: [Subjects.termOfApp(sessionId, "main")] });
  const count = (await consumer.info()).num_pending;
  let last = 0;
  let read = 0;
  for await (const m of await consumer.fetch({ max_messages: count, expires: 10_000 })) {
    if (!m.headers?.has(Headers.exitCode)) last = m.seq;
    if (++read === count) break;
  }
  return last;
}

interface Seen {
  checkpoint: ScreenCheckpoint;
  generation: string | undefined;
}

/** Checkpoints published on a subject (core subscription; JetStream publishes reach it too). */
function collectCheckpoints(subject: string): Collector<Seen> {
  const seen = new Collector<Seen>();
  nats.nc.subscribe(subject, {
    callback: (_err, msg: Msg) => {
      const decoded = decodeJson(ScreenCheckpoint, msg.data);
      if (decoded.ok) seen.push({ checkpoint: decoded.value, generation: msg.headers?.get(Headers.placementGeneration) });
    },
  });
  return seen;
}

/** A clock the test moves, with timers that fire when it passes them. */
function manualClock() {
  let now = 0;
  let timers: Array<{ at: number; fn: () => void }> = [];
  return {
    clock: {
      now: () => now,
      after: (ms: number, fn: () => void) => {
        const t = { at: now + ms, fn };
        timers.push(t);
        return () => {
          timers = timers.filter((x) => x !== t);
        };
      },
    },
    pending: () => timers.map((t) => t.at - now),
    advance(ms: number) {
      now += ms;
      const due = timers.filter((t) => t.at <= now);
      timers = timers.filter((t) => t.at > now);
      for (const t of due) t.fn();
    },
  };
}

/** The rows of a checkpoint's screen repainted in a terminal of its size (trailing blanks trimmed). */
async function rendered(c: ScreenCheckpoint): Promise<Record<number, string>> {
  const e = new ScreenEmulator(screenSize(c.cols, c.rows));
  e.write(Buffer.from(c.screen));
  const rows = await e.visibleRows();
  e.dispose();
  return { ...rows };
}

let n = 0;
function tracker(clock: ReturnType<typeof manualClock>["clock"], maxBacklogBytes?: number) {
  const subject = Subjects.screen("p", "r1", `st${++n}`, "main");
  const metrics = createRunnerMetrics();
  const t = new ScreenTracker({ js, encode: encodeJson, subject, placementGeneration: 4, quietMs: 100, intervalMs: 1_000, clock, metrics, log: silentLogger(), ...(maxBacklogBytes ? { maxBacklogBytes } : {}) });
  return { t, subject, metrics, seen: collectCheckpoints(subject) };
}

describe("screen tracker", () => {
  it("checkpoints the screen once output is quiet, then at most once per interval, with the cursor of the last chunk", async () => {
    const m = manualClock();
    const { t, metrics, seen } = tracker(m.clock);
    await nats.nc.flush();
    t.observe(7, Buffer.from("\x1b[1mhello\x1b[0m\r\n"));
    expect(m.pending()).toEqual([100]);
    m.advance(100);
    const first = await seen.waitFor(() => true);
    expect(first.generation).toBe("4");
    expect(first.checkpoint).toMatchObject({ cursor: 7, cols: 80, rows: 24 });
    expect(first.checkpoint.screen).toContain("hello");
    await t.idle();
    // More output right away: the next checkpoint waits for the interval since the first.
    t.observe(9, Buffer.from("world"));
    expect(m.pending()).toEqual([1_000]);
    m.advance(1_000);
    const second = await seen.waitFor((s) => s.checkpoint.cursor === 9);
    expect(second.checkpoint.screen).toContain("world");
    // Settled: the write in flight has its ack (subscribers may see a message before its publisher does).
    await t.settle();
    expect(await counterValue(metrics.screenCheckpoints)).toBe(2);
  });

  it("writes the final screen when the log ends, frees the emulator, and continues that screen if output resumes", async () => {
    const m = manualClock();
    const { t, seen } = tracker(m.clock);
    await nats.nc.flush();
    t.observe(3, Buffer.from("before exit\r\n"));
    await t.settle();
    expect((await seen.waitFor(() => true)).checkpoint).toMatchObject({ cursor: 3 });
    expect(m.pending()).toEqual([]);
    t.observe(5, Buffer.from("restarted"));
    await t.settle();
    const resumed = await seen.waitFor((s) => s.checkpoint.cursor === 5);
    expect(resumed.checkpoint.screen).toContain("before exit");
    expect(resumed.checkpoint.screen).toContain("restarted");
  });

  it("follows the log's resize markers: checkpoints repaint at the size the log is at, also when output resumes after the log ended", async () => {
    const m = manualClock();
    const { t, seen } = tracker(m.clock);
    await nats.nc.flush();
    t.observe(3, Buffer.from(`\x1b[?1049h\x1b[2J\x1b[H${"a".repeat(95)}`));
    t.resized(4, { cols: 100, rows: 30 });
    t.observe(5, Buffer.from("\x1b[2J\x1b[Hrepainted\x1b[30;1Hbottom row"));
    await t.settle();
    const first = await seen.waitFor((s) => s.checkpoint.cursor === 5);
    expect(first.checkpoint).toMatchObject({ cols: 100, rows: 30 });
    expect(await rendered(first.checkpoint)).toMatchObject({ 0: "repainted", 29: "bottom row" });
    // Resized while the log is ended (no emulator held): the restarted output continues at the new size.
    t.resized(6, { cols: 120, rows: 40 });
    t.observe(7, Buffer.from("\x1b[40;1Hnew bottom"));
    await t.settle();
    const resumed = await seen.waitFor((s) => s.checkpoint.cursor === 7);
    expect(resumed.checkpoint).toMatchObject({ cols: 120, rows: 40 });
    expect(await rendered(resumed.checkpoint)).toMatchObject({ 0: "repainted", 29: "bottom row", 39: "new bottom" });
  });

  it("writes nothing for an app that printed nothing, and nothing after an abort", async () => {
    const m = manualClock();
    const idle = tracker(m.clock);
    await idle.t.settle();
    const aborted = tracker(m.clock);
    aborted.t.observe(1, Buffer.from("x"));
    aborted.t.abort();
    m.advance(10_000);
    await aborted.t.settle();
    await nats.nc.flush();
    expect(idle.seen.items).toEqual([]);
    expect(aborted.seen.items).toEqual([]);
  });

  it("gives up on an app placement whose emulator falls behind the output, and says so", async () => {
    const m = manualClock();
    const { t, metrics, seen } = tracker(m.clock, 1024);
    t.observe(1, Buffer.from(`\x1b[31m${"r".repeat(4096)}`));
    m.advance(10_000);
    await t.settle();
    await nats.nc.flush();
    expect(seen.items).toEqual([]);
    expect((await metrics.screenCheckpointsSkipped.get()).values.find((v) => v.labels.reason === "backlog")?.value).toBe(1);
  });
});

describe("screen checkpoints of a running app", () => {
  it("the runner checkpoints what its app printed, with the cursor of its last chunk, and a final one at exit", async () => {
    const scheduler = fakeScheduler(nats.nc, 0);
    const t = testAgent(nats.nc, { terminal: { coalesceMs: 0, screen: { quietMs: 1, intervalMs: 1 } } });
    agents.push(t);
    await t.agent.start();
    scheduler.sub.unsubscribe();
    const sessionId = "screen-e2e";
    const term = collectTerm(nats.nc, sessionId, "main");
    const seen = collectCheckpoints(Subjects.screen(t.config.poolId, t.config.runnerId, sessionId, "main"));
    await nats.nc.flush();
    const script = "printf 'plain line\\n'; printf '\\033[?1049h\\033[2J\\033[Hfull screen app'; printf '\\033[3;5Hstatus'; exit 0";
    await dispatchTo(nats.nc, t, {
      type: "start",
      sessionId,
      workspaceId: "ws1",
      runnerGeneration: t.agent.generation,
      placementGeneration: 1,
      spec: { cmd: ["sh", "-c", script] },
      mode: "run",
      trigger: "initial",
    } as DispatchCommand);
    await term.waitFor((m) => m.exitCode !== undefined);
    // The final checkpoint names the last data chunk and shows the alternate screen as painted.
    // (An earlier one may already show all of it, if the output's last chunk held no new text.)
    const lastChunk = await lastDataChunk(sessionId);
    const final = await seen.waitFor((s) => s.checkpoint.cursor === lastChunk);
    expect(final.generation).toBe("1");
    expect(final.checkpoint.screen).toContain("status");
    expect(final.checkpoint.screen).toContain("full screen app");
    expect(final.checkpoint.screen).toContain("\x1b[?1049h");
  });
});
