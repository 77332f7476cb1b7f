/**
 * Terminal attach through the real stack: no byte lost or repeated across a
 * killed gateway and a reconnect to another replica, and a screen snapshot of
 * an alternate-screen program that matches its screen.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import xterm from "@xterm/headless";
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
