/**
 * Terminal attach through the real stack: no byte lost or repeated across a
 * killed gateway and a reconnect to another replica, and a screen snapshot of
 * an alternate-screen program that matches its screen.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import xterm from "@xterm/headless";
import { connect } from "@nats-io/transport-node";
import { ScreenCheckpoint } from "@paddock/contracts";
import { startService, startStack, type ServiceProcess, type Stack } from "@paddock/testing";
import { api, sessionOf, Terminal } from "./helpers.ts";

let stack: Stack;
let second: ServiceProcess;
let secondUrl: string;

beforeAll(async () => {
  stack = await startStack();
  second = await startService("gateway", { ...stack.commonEnv, PADDOCK_HTTP_PORT: "0", PADDOCK_DEV_TOKEN: stack.token });
  secondUrl = `http://127.0.0.1:${String(second.ready.httpPort)}`;
});
afterAll(async () => {
  await second?.stop();
  await stack?.stop();
});

describe("resume without loss", () => {
  it("a client reading a long numbered sequence across a killed gateway and a reconnect to another replica gets every byte exactly once", async () => {
    const total = 20_000;
    const created = await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", `seq 1 ${total}; exec sleep 600`] } });
    const id = sessionOf(created).id;
    const first = await Terminal.open(stack.url, stack.token, id, "since=all");
    await first.until((t) => t.output().includes("\n5000"));
    await stack.gateway.kill();
    await first.closed;
    const outputs = first.frames.filter((f) => f.kind === "output");
    const last = outputs[outputs.length - 1];
    const lastCursor = last?.kind === "output" ? last.cursor : 0;
    const resumed = await Terminal.open(secondUrl, stack.token, id, `since=${lastCursor}`);
    await resumed.until((t) => (first.output() + t.output()).includes(`\n${total}\r\n`));
    resumed.ws.close();
    const expected = Array.from({ length: total }, (_, i) => `${i + 1}\r\n`).join("");
    expect(first.output() + resumed.output()).toBe(expected);
    // Cursors strictly increase across the two connections: nothing was delivered twice.
    const cursors = [...first.frames, ...resumed.frames].flatMap((f) => (f.kind === "output" ? [f.cursor] : []));
    for (let i = 1; i < cursors.length; i++) expect(cursors[i]).toBeGreaterThan(cursors[i - 1] ?? 0);
  });
});

describe("screen snapshots", () => {
  it("an alternate-screen program attached with since=screen repaints exactly its screen", async () => {
    const script = "printf 'scrollback junk\\n'; printf '\\033[?1049h\\033[2J\\033[Htitle line'; printf '\\033[5;10Hmarker'; printf '\\033[24;1Hstatus'; exec sleep 600";
    const created = await api(secondUrl, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", script] } });
    const id = sessionOf(created).id;
    const all = await Terminal.open(secondUrl, stack.token, id, "since=all");
    await all.until((t) => t.output().includes("status"));
    all.ws.close();
    // Twice: the second attach is served from the incrementally fed emulator.
    for (let round = 0; round < 2; round++) {
      const screen = await Terminal.open(secondUrl, stack.token, id, "since=screen");
      await screen.until((t) => t.frames.some((f) => f.kind === "output"));
      const snapshot = screen.frames.find((f) => f.kind === "output");
      screen.ws.close();
      const term = new xterm.Terminal({ cols: 80, rows: 24, allowProposedApi: true });
      await new Promise<void>((r) => term.write(snapshot?.kind === "output" ? snapshot.text : "", r));
      const line = (y: number) => term.buffer.active.getLine(y)?.translateToString(true) ?? "";
      expect(line(0)).toBe("title line");
      expect(line(4)).toBe(`${" ".repeat(9)}marker`);
      expect(line(23)).toBe("status");
      expect(term.buffer.active.type).toBe("alternate");
      term.dispose();
    }
  });
});

/** A full-screen program: on start and on every SIGWINCH it clears and draws a frame of the terminal's size, its label last. */
const FRAME_SCRIPT = [
  "draw() {",
  "  set -- $(stty size); rows=$1; cols=$2",
  '  line=$(printf "%${cols}s" "" | tr " " "=")',
  "  printf '\\033[2J\\033[H%s\\033[%d;1H%s\\033[%d;1Hsize %dx%d' \"$line\" \"$rows\" \"$line\" $(( (rows + 1) / 2 )) \"$cols\" \"$rows\"",
  "}",
  "trap draw WINCH",
  "printf '\\033[?1049h'",
  "draw",
  "while :; do sleep 600 & wait $!; done",
].join("\n");

function expectedFrame(cols: number, rows: number): string[] {
  const label = `size ${String(cols)}x${String(rows)}`;
  return Array.from({ length: rows }, (_, y) => (y === 0 || y === rows - 1 ? "=".repeat(cols) : y === Math.ceil(rows / 2) - 1 ? label : ""));
}

/** The first output frame of a since=screen attach (the snapshot) repainted in a terminal of cols × rows. */
async function snapshotRows(url: string, id: string, cols: number, rows: number): Promise<{ cursor: number; rows: string[] }> {
  const t = await Terminal.open(url, stack.token, id, "since=screen");
  await t.until((x) => x.frames.some((f) => f.kind === "output"));
  t.ws.close();
  const snapshot = t.frames.find((f) => f.kind === "output");
  const term = new xterm.Terminal({ cols, rows, allowProposedApi: true });
  await new Promise<void>((r) => term.write(snapshot?.kind === "output" ? snapshot.text : "", r));
  const out = Array.from({ length: rows }, (_, y) => term.buffer.active.getLine(y)?.translateToString(true) ?? "");
  term.dispose();
  return { cursor: snapshot?.kind === "output" ? snapshot.cursor : 0, rows: out };
}

describe("screen snapshots follow the terminal's size", () => {
  // The stack's own gateway was killed above: these tests use the second one and a third.
  let third: ServiceProcess;
  let thirdUrl: string;
  beforeAll(async () => {
    third = await startService("gateway", { ...stack.commonEnv, PADDOCK_HTTP_PORT: "0", PADDOCK_DEV_TOKEN: stack.token });
    thirdUrl = `http://127.0.0.1:${String(third.ready.httpPort)}`;
  });
  afterAll(async () => {
    await third?.stop();
  });

  it("a full-screen program left at any size is shown at that size by since=screen, from the log and from the runner's checkpoint", async () => {
    const nc = await connect({ servers: stack.nats.url });
    try {
      const created = await api(secondUrl, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", FRAME_SCRIPT] } });
      const id = sessionOf(created).id;
      // Every checkpoint the runner writes (a core subscription sees JetStream publishes).
      const checkpoints: ScreenCheckpoint[] = [];
      let onCheckpoint = () => undefined as void;
      nc.subscribe(`paddock.screen.*.*.${id}.main`, {
        callback: (_err, m) => {
          checkpoints.push(ScreenCheckpoint.parse(m.json()));
          onCheckpoint();
        },
      });
      await nc.flush();
      const first = await Terminal.open(secondUrl, stack.token, id, "since=all");
      await first.until((t) => t.output().includes("size 80x24"));
      first.ws.close();
      for (const [cols, rows] of [[100, 30], [132, 43], [60, 20], [90, 35]] as const) {
        // A controller in a terminal of this size attaches (the CLI sends its size first) and leaves once the program repainted.
        const controller = await Terminal.open(secondUrl, stack.token, id, "mode=controller&since=screen");
        await controller.until((t) => t.textFrames().some((f) => f.type === "hello"));
        controller.ws.send(JSON.stringify({ type: "resize", cols, rows }));
        await controller.until((t) => t.output().includes(`size ${String(cols)}x${String(rows)}`));
        controller.ws.close();
        await controller.closed;
        // Attached again at once: the gateway renders the log after its last screen.
        const fresh = await snapshotRows(secondUrl, id, cols, rows);
        expect(fresh.rows, `${String(cols)}x${String(rows)} from the log`).toEqual(expectedFrame(cols, rows));
        // Once the runner checkpointed it, the other gateway (nothing of this session's screen kept since) serves the checkpoint.
        await new Promise<void>((resolve) => {
          const check = () => {
            if (checkpoints.some((c) => c.cursor >= fresh.cursor)) resolve();
          };
          onCheckpoint = check;
          check();
        });
        const checkpoint = checkpoints.find((c) => c.cursor >= fresh.cursor);
        expect(checkpoint).toMatchObject({ cols, rows });
        const fromCheckpoint = await snapshotRows(thirdUrl, id, cols, rows);
        expect(fromCheckpoint.rows, `${String(cols)}x${String(rows)} from the checkpoint`).toEqual(expectedFrame(cols, rows));
      }
    } finally {
      await nc.close();
    }
  });

  it("vim left in a 100 × 30 terminal comes back as it was left, without a redraw", async () => {
    const script = "printf 'line %s\\n' 1 2 3 4 5 > notes.txt; exec vim -u NONE -i NONE -N -n notes.txt";
    const created = await api(secondUrl, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", script] } });
    const id = sessionOf(created).id;
    // vim paints its `~` rows with colored blanks: compare text only. The last row is vim's message line.
    const left = (rows: string[]) => rows.slice(0, 29).map((r) => r.trimEnd());
    const expected = ["line 1", "line 2", "line 3", "line 4", "line 5", ...Array.from({ length: 24 }, () => "~")];
    const controller = await Terminal.open(secondUrl, stack.token, id, "mode=controller&since=screen");
    await controller.until((t) => t.output().includes("line 5"));
    controller.ws.send(JSON.stringify({ type: "resize", cols: 100, rows: 30 }));
    // vim repaints on SIGWINCH, top to bottom: once it drew row 29 (which 24 rows never had), rows 1-29 are drawn.
    await controller.until((t) => /\x1b\[29;1H(\x1b\[[0-9;]*m)*~/.test(t.output()));
    controller.ws.close();
    await controller.closed;
    // Detached and attached again from a 100 × 30 terminal: the gateway that served the controller, and one that never saw it.
    for (const url of [secondUrl, thirdUrl]) expect(left((await snapshotRows(url, id, 100, 30)).rows)).toEqual(expected);
  });
});
