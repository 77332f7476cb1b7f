import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { TUNNEL_WINDOW_BYTES } from "@paddock/contracts";
import { useNatsServer } from "@paddock/testing/vitest";
import { TunnelBrokenError, TunnelStream } from "./tunnel.ts";

const nats = useNatsServer();
let n = 0;

/** Ticks driven by the test: each call of `tick` runs every ping of every tunnel made with it. */
function manualClock() {
  const fns = new Set<() => void>();
  return {
    every: (_ms: number, fn: () => void) => {
      fns.add(fn);
      return () => fns.delete(fn);
    },
    tick: () => [...fns].forEach((fn) => fn()),
  };
}

/** Two ends of one tunnel, each subscribed to what the other sends. */
function pair(clock = manualClock()) {
  n += 1;
  const aIn = `test.tunnel.${n}.a`;
  const bIn = `test.tunnel.${n}.b`;
  const a = new TunnelStream({ nc: nats.nc, sendTo: bIn, every: clock.every, pingMs: 1_000 });
  const b = new TunnelStream({ nc: nats.nc, sendTo: aIn, every: clock.every, pingMs: 1_000 });
  const subs = [nats.nc.subscribe(aIn, { callback: (_e, m) => a.receive(m) }), nats.nc.subscribe(bIn, { callback: (_e, m) => b.receive(m) })];
  const errors: Error[] = [];
  for (const s of [a, b]) s.on("error", (err: Error) => errors.push(err));
  return { a, b, aIn, bIn, clock, errors, close: () => subs.forEach((s) => s.unsubscribe()) };
}

/** Everything s reads up to its end (by events: an async iterator would destroy s, its writing half too, at the end). */
function readAll(s: TunnelStream): Promise<Buffer> {
  const parts: Buffer[] = [];
  s.on("data", (chunk: Buffer) => parts.push(chunk));
  return new Promise((resolve) => s.once("end", () => resolve(Buffer.concat(parts))));
}

describe("a tunnel over core NATS", () => {
  it("carries bytes both ways whole and in order, each direction ending on its own", async () => {
    const t = pair();
    const up = randomBytes(3 * 1024 * 1024 + 11);
    const down = randomBytes(2 * 1024 * 1024 + 5);
    const gotAtB = readAll(t.b);
    const gotAtA = readAll(t.a);
    t.a.end(up);
    // b still writes after a's half-close.
    t.b.end(down);
    expect((await gotAtB).equals(up)).toBe(true);
    expect((await gotAtA).equals(down)).toBe(true);
    expect(t.errors).toEqual([]);
    t.close();
  });

  it("runs a writer at most a window ahead of a reader that does not read", async () => {
    const t = pair();
    t.b.pause();
    let written = 0;
    const piece = Buffer.alloc(64 * 1024);
    // Write until the stream says stop, then let the writes settle: what arrived is bounded by the window.
    for (let i = 0; i < 64; i++) {
      t.a.write(piece);
      written += piece.length;
    }
    await nats.nc.flush();
    await new Promise<void>((resolve) => setImmediate(resolve));
    await nats.nc.flush();
    // What crossed waits at b, at most a window of it; the rest waits at a, unsent.
    expect(t.b.readableLength).toBeGreaterThan(0);
    expect(t.b.readableLength).toBeLessThanOrEqual(TUNNEL_WINDOW_BYTES);
    expect(t.a.writableLength).toBeGreaterThanOrEqual(written - TUNNEL_WINDOW_BYTES - 64 * 1024);
    // Reading on lets the rest through, whole.
    t.a.end();
    const all = readAll(t.b);
    t.b.resume();
    expect((await all).length).toBe(written);
    t.close();
  });

  it("breaks (an error, never a hole) on a message out of order, an abort, nonsense, or a silent peer", async () => {
    const gap = pair();
    const h = natsHeaders();
    h.set("Paddock-Tunnel", "data");
    h.set("Paddock-Seq", "2");
    nats.nc.publish(gap.bIn, Buffer.from("skipped one"), { headers: h });
    await nats.nc.flush();
    await new Promise((r) => gap.b.once("close", r));
    expect(gap.errors[0]).toBeInstanceOf(TunnelBrokenError);
    gap.close();

    const aborted = pair();
    aborted.a.destroy();
    await new Promise((r) => aborted.b.once("close", r));
    expect(aborted.errors.map((e) => e.message)).toEqual(["the other end aborted the tunnel"]);
    aborted.close();

    const nonsense = pair();
    const odd = natsHeaders();
    odd.set("Paddock-Tunnel", "teleport");
    nats.nc.publish(nonsense.bIn, Buffer.alloc(0), { headers: odd });
    await new Promise((r) => nonsense.b.once("close", r));
    expect(nonsense.errors[0]).toBeInstanceOf(TunnelBrokenError);
    nonsense.close();

    // b's messages never reach a (its subscription is gone): two ticks without a word break a.
    const silent = pair();
    silent.close();
    silent.clock.tick();
    expect(silent.a.destroyed).toBe(false);
    silent.clock.tick();
    await new Promise((r) => silent.a.once("close", r));
    expect(silent.errors.some((e) => e.message === "the other end of the tunnel went silent")).toBe(true);
  });
});
