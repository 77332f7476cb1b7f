import { afterEach, describe, expect, it } from "vitest";
import { ScreenEmulator, screenSize } from "@paddock/screen";
import { ScreenHost } from "./screen-host.ts";

/** A full-screen repaint, as a TUI redraws: every row placed and coloured, `frames` times. */
function repaint(frames: number): Buffer {
  let out = "\x1b[?1049h";
  for (let f = 0; f < frames; f++) {
    for (let row = 1; row <= 24; row++) out += `\x1b[${row};1H\x1b[3${(row + f) % 8}m${`frame ${f} row ${row} `.padEnd(79, "·")}\x1b[0m`;
  }
  return Buffer.from(out, "utf8");
}

const hosts: ScreenHost[] = [];
afterEach(async () => {
  for (const host of hosts.splice(0)) await host.stop();
});

describe("screen host (emulators on a worker thread)", () => {
  it("captures the same screen as an emulator on this thread, after every write before the capture, and reports its backlog parsed", async () => {
    const host = new ScreenHost();
    hosts.push(host);
    const size = screenSize(80, 24);
    const remote = host.open(size);
    const local = new ScreenEmulator(size);
    const bytes = repaint(40);
    // In pieces, as committed chunks arrive, a resize between them.
    for (let at = 0; at < bytes.length; at += 4096) {
      remote.write(bytes.subarray(at, at + 4096));
      local.write(bytes.subarray(at, at + 4096));
      if (at === 8192) {
        remote.resize(screenSize(100, 30));
        local.resize(screenSize(100, 30));
      }
    }
    const [fromWorker, fromHere] = await Promise.all([remote.capture(), local.capture()]);
    expect(fromWorker).toBeDefined();
    expect(fromWorker).toEqual(fromHere);
    // Once parsed, what was written is not counted as backlog (reports arrive after the capture's answer at the latest).
    await new Promise((resolve) => setTimeout(resolve, 0));
    await remote.capture();
    expect(remote.backlogBytes).toBeLessThan(bytes.length);
    remote.dispose();
    local.dispose();
  });

  it("keeps screens apart, and a disposed one writes and captures nothing", async () => {
    const host = new ScreenHost();
    hosts.push(host);
    const a = host.open(screenSize(80, 24));
    const b = host.open(screenSize(80, 24));
    a.write(Buffer.from("alpha"));
    b.write(Buffer.from("\x1b[2;3Hbravo"));
    const [ca, cb] = await Promise.all([a.capture(), b.capture()]);
    expect(ca?.screen).toContain("alpha");
    expect(ca?.screen).not.toContain("bravo");
    expect(cb?.screen).toContain("bravo");
    b.dispose();
    b.write(Buffer.from("more"));
    expect(await b.capture()).toBeUndefined();
    expect(b.backlogBytes).toBe(Number.POSITIVE_INFINITY);
  });

  it("says so when its worker fails unasked, and fails the screens it held", async () => {
    let lost!: (err: unknown) => void;
    const failed = new Promise<unknown>((resolve) => (lost = resolve));
    const host = new ScreenHost({ entry: new URL("data:text/javascript,throw new Error('the worker broke')"), onLost: lost });
    hosts.push(host);
    const screen = host.open(screenSize(80, 24));
    expect(String(await failed)).toContain("the worker broke");
    expect(screen.backlogBytes).toBe(Number.POSITIVE_INFINITY);
    expect(await screen.capture()).toBeUndefined();
  });

  it("fails the screens of a worker that ends (their trackers give up) and starts another for the next screen", async () => {
    const host = new ScreenHost();
    hosts.push(host);
    const before = host.open(screenSize(80, 24));
    before.write(Buffer.from("before"));
    expect((await before.capture())?.screen).toContain("before");
    await host.stop();
    expect(before.backlogBytes).toBe(Number.POSITIVE_INFINITY);
    expect(await before.capture()).toBeUndefined();
    const after = host.open(screenSize(80, 24));
    after.write(Buffer.from("after"));
    expect((await after.capture())?.screen).toContain("after");
  });
});
