/**
 * since=screen from the placed runner's screen checkpoints (SCREENS): served
 * as is, or with the chunks after it rendered on top; checkpoints that do
 * not stand for the placement's log are never used, and counted.
 */
import { describe, expect, it } from "vitest";
import { jetstream } from "@nats-io/jetstream";
import { headers } from "@nats-io/transport-node";
import { Headers, MAX_SCREEN_CHECKPOINT_BYTES, Subjects } from "@paddock/contracts";
import { ScreenEmulator, screenSize } from "@paddock/screen";
import { makeSession, openOk, publishChunk, RUNNER, useHarness, TOKENS, WS1, type WsClient } from "../testing/testkit.ts";

let n = 0;
const h = useHarness();

function newSession(placementGeneration = 1): string {
  const id = `scr${++n}`;
  h.scheduler.put(makeSession({ id, workspaceId: WS1, creatorId: "alice", placementGeneration }));
  return id;
}

/** Publishes a checkpoint as a runner would (body as given: an object is JSON-encoded). */
async function publishCheckpoint(
  sessionId: string,
  body: unknown,
  opts: { placementGeneration?: number; runner?: { poolId: string; runnerId: string } } = {},
): Promise<void> {
  const runner = opts.runner ?? { poolId: RUNNER.poolId, runnerId: RUNNER.id };
  const hdr = headers();
  hdr.set(Headers.placementGeneration, String(opts.placementGeneration ?? 1));
  const data = typeof body === "string" ? body : JSON.stringify(body);
  await jetstream(h.nc).publish(Subjects.screen(runner.poolId, runner.runnerId, sessionId, "main"), data, { headers: hdr });
}

async function count(metric: "screenSnapshots" | "droppedCheckpoints", label: string): Promise<number> {
  const key = metric === "screenSnapshots" ? "source" : "reason";
  return (await h.metrics[metric].get()).values.find((v) => (v.labels as Record<string, string | number | undefined>)[key] === label)?.value ?? 0;
}

async function screenOf(id: string): Promise<{ hello: Record<string, unknown>; snap: { cursor: number; text: string }; client: WsClient }> {
  const client = await openOk(h.wsUrl, id, "since=screen", TOKENS.bob);
  const hello = await client.nextText();
  return { hello, snap: await client.nextBinary(), client };
}

describe("screen snapshots from checkpoints", () => {
  it("serves a checkpoint as is when nothing after it shows; an exit marker after it still reaches the client", async () => {
    const id = newSession();
    const s1 = await publishChunk(h.nc, id, "main", "hello\r\n");
    await publishCheckpoint(id, { cursor: s1, cols: 80, rows: 24, screen: "FROM CHECKPOINT" });
    const marker = await publishChunk(h.nc, id, "main", "", { exitCode: "0" });
    const before = await count("screenSnapshots", "checkpoint");
    const { hello, snap, client } = await screenOf(id);
    expect(hello).toMatchObject({ cursor: marker });
    expect(snap).toEqual({ cursor: s1, text: "FROM CHECKPOINT" });
    expect(await client.nextText()).toEqual({ type: "exit", app: "main", code: 0 });
    expect((await client.closed).code).toBe(1000);
    expect((await count("screenSnapshots", "checkpoint")) - before).toBe(1);
  });

  it("renders the chunks after a checkpoint on top of its screen, not the log before it", async () => {
    const id = newSession();
    await publishChunk(h.nc, id, "main", "NOT IN THE CHECKPOINT\r\n");
    const s1 = await publishChunk(h.nc, id, "main", "base\r\n");
    await publishCheckpoint(id, { cursor: s1, cols: 80, rows: 24, screen: "base\r\n" });
    const s2 = await publishChunk(h.nc, id, "main", "tail");
    const before = await count("screenSnapshots", "checkpoint_tail");
    const { snap, client } = await screenOf(id);
    expect(snap.cursor).toBe(s2);
    expect(snap.text).toContain("base");
    expect(snap.text).toContain("tail");
    expect(snap.text).not.toContain("NOT IN THE CHECKPOINT");
    expect((await count("screenSnapshots", "checkpoint_tail")) - before).toBe(1);
    const live = await publishChunk(h.nc, id, "main", "!");
    expect(await client.nextBinary()).toEqual({ cursor: live, text: "!" });
    client.close();
    // The next attach is served from the emulator the checkpoint seeded.
    const cached = await count("screenSnapshots", "cached");
    const again = await screenOf(id);
    expect(again.snap.cursor).toBe(live);
    expect(again.snap.text).toContain("tail!");
    expect((await count("screenSnapshots", "cached")) - cached).toBe(1);
    again.client.close();
  });

  it("never uses a checkpoint that does not stand for the placement's log, and counts it", async () => {
    const cases: Array<{ reason: string; body: unknown; placementGeneration?: number; cursorPastLog?: boolean }> = [
      { reason: "stale", body: undefined, placementGeneration: 1 },
      { reason: "ahead", body: undefined, placementGeneration: 3 },
      { reason: "invalid", body: "not json" },
      { reason: "invalid", body: { cursor: 0, cols: 80, rows: 24, screen: "BOGUS" } },
      { reason: "invalid", body: { cols: 80, rows: 24, screen: "BOGUS" } },
      { reason: "invalid", body: { cursor: 1, cols: 1001, rows: 24, screen: "BOGUS" } },
      { reason: "invalid", body: { cursor: 1, cols: 80, rows: 24, screen: "BOGUS", extra: true } },
      { reason: "invalid", body: { cursor: 1, cols: 80, rows: 24, screen: "B".repeat(MAX_SCREEN_CHECKPOINT_BYTES + 1) } },
      { reason: "beyond_log", body: undefined, cursorPastLog: true },
    ];
    for (const c of cases) {
      const id = newSession(2);
      const s1 = await publishChunk(h.nc, id, "main", "the real screen\r\n", { placementGeneration: 2 });
      const body = c.body ?? { cursor: c.cursorPastLog ? s1 + 1_000_000 : s1, cols: 80, rows: 24, screen: "BOGUS" };
      await publishCheckpoint(id, body, { placementGeneration: c.placementGeneration ?? 2 });
      const before = await count("droppedCheckpoints", c.reason);
      const { snap, client } = await screenOf(id);
      expect(snap.text, c.reason).toContain("the real screen");
      expect(snap.text, c.reason).not.toContain("BOGUS");
      expect(snap.cursor).toBe(s1);
      expect((await count("droppedCheckpoints", c.reason)) - before, c.reason).toBe(1);
      client.close();
    }
  });

  it("reads only the placed runner's checkpoint: another runner's, whatever generation it claims, is never seen", async () => {
    const id = newSession();
    const s1 = await publishChunk(h.nc, id, "main", "mine\r\n");
    await publishCheckpoint(id, { cursor: s1, cols: 80, rows: 24, screen: "FORGED" }, { runner: { poolId: RUNNER.poolId, runnerId: "intruder" } });
    const { snap, client } = await screenOf(id);
    expect(snap.text).toContain("mine");
    expect(snap.text).not.toContain("FORGED");
    client.close();
  });

  it("without a checkpoint, replays the log; an exited app's snapshot stops before its exit marker", async () => {
    const id = newSession();
    const s1 = await publishChunk(h.nc, id, "main", "last words\r\n");
    await publishChunk(h.nc, id, "main", "", { exitCode: "3" });
    const before = await count("screenSnapshots", "replay");
    const { snap, client } = await screenOf(id);
    expect(snap.cursor).toBe(s1);
    expect(snap.text).toContain("last words");
    expect(await client.nextText()).toEqual({ type: "exit", app: "main", code: 3 });
    expect((await count("screenSnapshots", "replay")) - before).toBe(1);
  });
});

/** A snapshot's screen repainted in a terminal of cols × rows, as rows of text. */
async function repainted(text: string, cols: number, rows: number): Promise<string[]> {
  const e = new ScreenEmulator(screenSize(cols, rows));
  e.write(Buffer.from(text));
  const out = await e.visibleRows();
  e.dispose();
  return out;
}

/** A full-screen frame as a program repainting on SIGWINCH draws it: a border row at the top and bottom, a label in the middle. */
function frame(cols: number, rows: number, label: string): string {
  return `\x1b[?1049h\x1b[2J\x1b[H${"=".repeat(cols)}\x1b[${String(Math.ceil(rows / 2))};1H${label}\x1b[${String(rows)};1H${"=".repeat(cols)}\x1b[1;1H`;
}

function expectedFrame(cols: number, rows: number, label: string): string[] {
  return Array.from({ length: rows }, (_, y) => (y === 0 || y === rows - 1 ? "=".repeat(cols) : y === Math.ceil(rows / 2) - 1 ? label : ""));
}

describe("screen snapshots follow the terminal's size", () => {
  it("renders at the size the log's resize markers say, replaying the log, on top of a checkpoint, and from the kept emulator", async () => {
    const id = newSession();
    await publishChunk(h.nc, id, "main", frame(80, 24, "at 80x24"));
    const m1 = await publishChunk(h.nc, id, "main", "", { terminalSize: "100x30" });
    const s1 = await publishChunk(h.nc, id, "main", frame(100, 30, "at 100x30"));
    // Replayed: the 100-column border must not wrap at 80.
    const first = await screenOf(id);
    expect(first.snap.cursor).toBe(s1);
    expect(await repainted(first.snap.text, 100, 30)).toEqual(expectedFrame(100, 30, "at 100x30"));
    first.client.close();
    // A checkpoint at 100x30, then a resize and a repaint after it.
    const seed = new ScreenEmulator(screenSize(100, 30));
    seed.write(Buffer.from(frame(100, 30, "checkpointed")));
    const captured = await seed.capture();
    seed.dispose();
    await publishCheckpoint(id, { cursor: s1, ...captured });
    await publishChunk(h.nc, id, "main", "", { terminalSize: "60x20" });
    const s2 = await publishChunk(h.nc, id, "main", frame(60, 20, "at 60x20"));
    const second = await screenOf(id);
    expect(second.snap.cursor).toBe(s2);
    expect(await repainted(second.snap.text, 60, 20)).toEqual(expectedFrame(60, 20, "at 60x20"));
    second.client.close();
    // The emulator kept from that attach takes the next resize too; a malformed marker changes nothing and shows nothing.
    await publishChunk(h.nc, id, "main", "", { terminalSize: "120x40" });
    await publishChunk(h.nc, id, "main", "", { terminalSize: "0x9999" });
    const s3 = await publishChunk(h.nc, id, "main", frame(120, 40, "at 120x40"));
    const third = await screenOf(id);
    expect(third.snap.cursor).toBe(s3);
    expect(await repainted(third.snap.text, 120, 40)).toEqual(expectedFrame(120, 40, "at 120x40"));
    third.client.close();
    // Replaying the log to a client, markers are not output: the chunk after one comes next.
    const all = await openOk(h.wsUrl, id, "since=all", TOKENS.bob);
    await all.nextText();
    await all.nextBinary();
    expect((await all.nextBinary()).cursor).toBe(m1 + 1);
    all.close();
  });
});
