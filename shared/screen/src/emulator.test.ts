import { describe, expect, it } from "vitest";
import xterm from "@xterm/headless";
import serialize from "@xterm/addon-serialize";
import { DEFAULT_SCREEN_SIZE, MAX_SCREEN_CELLS, ScreenEmulator, screenSize, type ScreenSize } from "./emulator.ts";
import { scanPlainText } from "./plain-text.ts";

const SIZE = { cols: 40, rows: 10, scrollback: 50 };

/** What parsing every byte renders: the reference the emulator's shortcut must equal. */
async function reference(chunks: Uint8Array[], size = SIZE): Promise<string> {
  const term = new xterm.Terminal({ ...size, allowProposedApi: true });
  const addon = new serialize.SerializeAddon();
  term.loadAddon(addon as never);
  for (const c of chunks) term.write(c);
  await new Promise<void>((r) => term.write("", r));
  const out = addon.serialize();
  term.dispose();
  return out;
}

async function emulated(chunks: Uint8Array[], size = SIZE): Promise<{ screen: string; skipped: number }> {
  const e = new ScreenEmulator(size);
  // As a log is fed: a piece at a time, the parser catching up in between.
  for (const c of chunks) {
    e.write(c);
    await e.parsedBelow(1);
  }
  const screen = (await e.snapshot()) ?? "";
  const skipped = e.skippedBytes;
  e.dispose();
  return { screen, skipped };
}

/** Cuts text into chunks of the given sizes (cycled), as the terminal log would hold it. */
function chunked(text: string | Buffer, sizes = [7, 300, 1, 64, 4096]): Uint8Array[] {
  const bytes = typeof text === "string" ? Buffer.from(text) : text;
  const out: Uint8Array[] = [];
  for (let i = 0, k = 0; i < bytes.length; k++) {
    const n = sizes[k % sizes.length] ?? 64;
    out.push(bytes.subarray(i, i + n));
    i += n;
  }
  return out;
}

const lines = (n: number, from = 0, eol = "\r\n") => Array.from({ length: n }, (_, i) => `line ${from + i} ${"x".repeat((from + i) % 70)}${eol}`).join("");

describe("plain text", () => {
  it("is printable text, TAB, CR and LF, and UTF-8 other than C1 controls", () => {
    expect(scanPlainText(Buffer.from("a\tb\nc\r\nd\n"))).toEqual({ plain: true, lineFeeds: 3, hasCR: true, lineFeedsAfterCR: 2, flat: false });
    expect(scanPlainText(Buffer.from("only printable ASCII, any length ~!"))).toMatchObject({ plain: true, flat: true });
    for (const notFlat of ["a\tb", "a\rb", "a\nb", "h\u00e9"]) expect(scanPlainText(Buffer.from(notFlat))).toMatchObject({ plain: true, flat: false });
    expect(scanPlainText(Buffer.from("héllo ✓ 漢字\n"))).toMatchObject({ plain: true, lineFeeds: 1, hasCR: false });
    for (const bad of ["\x1b[31m", "a\bb", "\x0e", "\x07", "\x00", "\x7f"]) expect(scanPlainText(Buffer.from(bad)).plain).toBe(false);
    // C1 controls as UTF-8 (U+009B is CSI), and a C2 that may start one in the next chunk.
    expect(scanPlainText(Buffer.from([0x61, 0xc2, 0x9b, 0x33, 0x31, 0x6d])).plain).toBe(false);
    expect(scanPlainText(Buffer.from([0x61, 0xc2])).plain).toBe(false);
    expect(scanPlainText(Buffer.from([0xc2, 0xa9])).plain).toBe(true);
  });
});

describe("screen emulator", () => {
  it("renders bulk plain output exactly as parsing every byte would, without parsing most of it", async () => {
    const log = chunked(`\x1b[1;32mcolored start\x1b[0m\r\n${lines(3000)}tail without newline`);
    const got = await emulated(log);
    expect(got.screen).toBe(await reference(log));
    expect(got.skipped).toBeGreaterThan(Buffer.byteLength(lines(3000)) / 2);
  });

  it("renders long lines without a line break exactly as parsing every byte would, without parsing most of them", async () => {
    let seed = 7;
    const letter = () => String.fromCharCode(33 + ((seed = (seed * 48271) % 2147483647) % 94));
    const flat = (n: number) => Array.from({ length: n }, letter).join("");
    // From several cursor columns and states: a fresh screen, mid-line, the last column with a wrap pending, a colour set.
    for (const start of ["", "\x1b[1;32mabc", `\x1b[10;1H${"z".repeat(40)}`, "\x1b[5;17Hmid", "\x1b[7m"]) {
      const log = chunked(`${start}${flat(120_000)}`, [4096, 333, 1, 9000, 64]);
      const got = await emulated(log);
      expect(got.screen).toBe(await reference(log));
      expect(got.skipped).toBeGreaterThan(100_000);
    }
    // Another size, and a run that ends the log with a line feed after it.
    const wide = { cols: 97, rows: 13, scrollback: 7 };
    const log = chunked(`${flat(50_001)}\r\nafter`, [5000, 17]);
    expect((await emulated(log, wide)).screen).toBe(await reference(log, wide));
  });

  it("parses a flat run whole where a byte's cell depends on more than its column: autowrap off, insert mode on", async () => {
    let n = 0;
    const flat = (k: number) => Array.from({ length: k }, () => String.fromCharCode(65 + (n++ % 26))).join("");
    for (const mode of ["\x1b[?7l", "\x1b[4h"]) {
      const log = chunked(`${mode}${flat(60_000)}`, [4096, 100]);
      const got = await emulated(log);
      expect(got.screen).toBe(await reference(log));
      expect(got.skipped).toBe(0);
    }
  });

  it("equals the reference through alternate screens, colors, UTF-8 split across chunks and LF-only lines", async () => {
    const text = Buffer.concat([
      Buffer.from(lines(500, 0, "\n")),
      Buffer.from("\x1b[?1049h\x1b[2J\x1b[H"),
      Buffer.from(lines(400, 500)),
      Buffer.from("\x1b[5;3Hvim-ish ✓ 漢字 é\x1b[7mreverse\x1b[0m"),
      Buffer.from(lines(300, 900)),
      Buffer.from("\x1b[?1049lback on the main screen\r\n"),
      Buffer.from(lines(900, 1200)),
    ]);
    for (const sizes of [[3, 5, 7, 300], [4096], [100, 1, 33, 2000]]) {
      const log = chunked(text, sizes);
      expect((await emulated(log)).screen).toBe(await reference(log));
    }
  });

  it("parses plain text that does not start at rest: inside an escape sequence, a partial character, a scroll region", async () => {
    const cases = [
      // An OSC title cut by a chunk boundary: the "plain" text after it belongs to the title.
      [Buffer.from("before\r\n\x1b]0;tit"), Buffer.from(`le ${lines(400)}\x07after`)],
      // A CSI cut before its final byte.
      [Buffer.from("\x1b[3"), Buffer.from(`1m${lines(400)}`)],
      // A UTF-8 character cut in two.
      [Buffer.from([0x61, 0xe2, 0x9c]), Buffer.from([0x93, ...Buffer.from(lines(400))])],
      // A scroll region: lines outside it keep what was written there.
      [Buffer.from("\x1b[2;5r\x1b[10;1Hfooter"), Buffer.from(`\x1b[3;1H${lines(10)}`), Buffer.from(lines(400))],
    ];
    for (const log of cases) {
      const got = await emulated(log);
      expect(got.screen).toBe(await reference(log));
    }
    // The scroll region case may drop nothing: its rows outside the region would be lost.
    const region = cases[3] as Buffer[];
    expect((await emulated(region)).skipped).toBe(0);
  });

  it("equals the reference on seeded random mixes of plain runs and escape sequences cut at random places", async () => {
    let seed = 20261202;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const escapes = ["\x1b[31m", "\x1b[0m", "\x1b[2J", "\x1b[H", "\x1b[5;7H", "\x1b[?1049h", "\x1b[?1049l", "\x1b[3;8r", "\x1b[r", "\x1b]0;title\x07", "\x1b[K", "\x1b[2A", "\x1b(0", "\x1b(B", "\x1b7", "\x1b8", "\b", "\x1b[4h", "\x1b[4l"];
    for (let round = 0; round < 6; round++) {
      const parts: string[] = [];
      for (let i = 0; i < 40; i++) {
        const kind = rand(4);
        if (kind === 0) parts.push(escapes[rand(escapes.length)] ?? "");
        // A long line without a break, of varied letters (a misplaced one shows).
        else if (kind === 1) parts.push(Array.from({ length: rand(12_000) }, (_, k) => String.fromCharCode(33 + ((k * 7 + round) % 94))).join(""));
        else parts.push(lines(rand(400), rand(1000), rand(4) === 0 ? "\n" : "\r\n"));
      }
      const text = Buffer.from(parts.join(""));
      const cuts: Uint8Array[] = [];
      for (let i = 0; i < text.length; ) {
        const n = 1 + rand(rand(2) === 0 ? 16 : 9000);
        cuts.push(text.subarray(i, i + n));
        i += n;
      }
      expect((await emulated(cuts)).screen).toBe(await reference(cuts));
    }
  });

  it("cuts scrollback to fit a byte bound, and answers undefined when the screen alone does not fit", async () => {
    const e = new ScreenEmulator(DEFAULT_SCREEN_SIZE);
    e.write(Buffer.from(lines(2000)));
    const full = (await e.snapshot()) ?? "";
    const cut = (await e.snapshot(Math.floor(full.length / 3))) ?? "";
    expect(cut.length).toBeGreaterThan(0);
    expect(cut.length).toBeLessThanOrEqual(full.length / 3);
    expect(full.endsWith(cut.slice(-200))).toBe(true);
    expect(await e.snapshot(10)).toBeUndefined();
    e.dispose();
    expect(await e.snapshot()).toBeUndefined();
  });

  it("reports its parse backlog so a feeder can wait (xterm drops writes past 50 MB pending)", async () => {
    const e = new ScreenEmulator();
    const colored = Buffer.from(`\x1b[31m${"r".repeat(1000)}\x1b[0m\r\n`.repeat(256));
    let maxBacklog = 0;
    for (let i = 0; i < 32; i++) {
      e.write(colored);
      maxBacklog = Math.max(maxBacklog, e.backlogBytes);
      await e.parsedBelow(1024 * 1024);
    }
    expect(maxBacklog).toBeLessThan(2 * 1024 * 1024);
    expect(await e.snapshot()).toContain("rrrr");
    e.dispose();
  });

  it("resizes at its place in the output: what came before at the old size, what follows at the new one", async () => {
    // A log cut into pieces, each followed by the size the terminal had from there on (reflow included).
    const steps: Array<[string, ScreenSize]> = [
      [`${lines(30)}${"w".repeat(95)}\r\nwrapped at 40`, { cols: 60, rows: 12, scrollback: 50 }],
      [`${lines(25, 30)}after the first resize`, { cols: 30, rows: 8, scrollback: 20 }],
      ["\x1b[?1049h\x1b[2J\x1b[Hfull screen\x1b[8;1Hbottom", { cols: 100, rows: 30, scrollback: 50 }],
      ["\x1b[2J\x1b[Hrepainted\x1b[30;1Hlast row", { cols: 100, rows: 30, scrollback: 50 }],
    ];
    const term = new xterm.Terminal({ ...SIZE, allowProposedApi: true });
    const addon = new serialize.SerializeAddon();
    term.loadAddon(addon as never);
    const e = new ScreenEmulator(SIZE);
    for (const [text, size] of steps) {
      await new Promise<void>((r) => term.write(text, r));
      term.options.scrollback = size.scrollback;
      term.resize(size.cols, size.rows);
      // Written in one go, never waiting: the resize must wait for the parser by itself.
      for (const piece of chunked(text, [5, 700])) e.write(piece);
      e.resize(size);
    }
    const got = await e.capture();
    expect(got).toEqual({ screen: addon.serialize(), cols: 100, rows: 30 });
    expect(e.size).toEqual({ cols: 100, rows: 30, scrollback: 50 });
    term.dispose();
    e.dispose();
  });

  it("captures exactly what was written before the call, whatever is written while the parser catches up", async () => {
    const e = new ScreenEmulator(SIZE);
    e.write(Buffer.from("\x1b[31mfirst\x1b[0m\r\n"));
    const captured = e.capture();
    e.write(Buffer.from("\x1b[32msecond\x1b[0m\r\n"));
    e.resize({ cols: 20, rows: 5, scrollback: 0 });
    const got = await captured;
    expect(got?.screen).toContain("first");
    expect(got?.screen).not.toContain("second");
    expect(got).toMatchObject({ cols: 40, rows: 10 });
    expect(await e.capture()).toMatchObject({ cols: 20, rows: 5 });
    e.dispose();
  });

  it("keeps scrollback within a cell budget for wide terminals, and all of the screen", () => {
    expect(screenSize(80, 24)).toEqual(DEFAULT_SCREEN_SIZE);
    expect(DEFAULT_SCREEN_SIZE).toEqual({ cols: 80, rows: 24, scrollback: 1000 });
    const wide = screenSize(500, 100);
    expect((wide.rows + wide.scrollback) * wide.cols).toBeLessThanOrEqual(MAX_SCREEN_CELLS);
    expect(screenSize(1000, 1000)).toEqual({ cols: 1000, rows: 1000, scrollback: 0 });
  });
});
