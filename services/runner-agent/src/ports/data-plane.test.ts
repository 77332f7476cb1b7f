import { once } from "node:events";
import { connect, createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { PassThrough } from "node:stream";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DATA_TICKET_BYTES, DATA_TICKET_TTL_MS, DataPlaneOffer } from "@paddock/contracts";
import { createLogger } from "@paddock/logging";
import { DATA_PREAMBLE_TIMEOUT_MS, DataPlane } from "./data-plane.ts";

/** Timers run by the test: `fire(ms)` runs those due within ms. */
function manualTimers() {
  const pending = new Set<{ ms: number; fn: () => void }>();
  return {
    after: (ms: number, fn: () => void) => {
      const t = { ms, fn };
      pending.add(t);
      return () => pending.delete(t);
    },
    fire(ms: number) {
      for (const t of [...pending]) {
        if (t.ms > ms) continue;
        pending.delete(t);
        t.fn();
      }
    },
    get size() {
      return pending.size;
    },
  };
}

let plane: DataPlane;
let timers: ReturnType<typeof manualTimers>;
let clock: number;
let activity: string[];
/** The app's side of the port: a real TCP server whose accepted sockets the test reads. */
let app: Server;
let accepted: Socket[];
/** Every socket of the test, destroyed after it. */
let sockets: Socket[];

beforeEach(async () => {
  timers = manualTimers();
  clock = 0;
  activity = [];
  plane = new DataPlane({ host: "127.0.0.1", port: 0, advertiseHost: "127.0.0.1", now: () => clock, after: timers.after, onActivity: (id) => activity.push(id), log: createLogger({ service: "test", level: "silent" }) });
  await plane.start();
  accepted = [];
  sockets = [];
  app = createServer({ allowHalfOpen: true }, (s) => {
    accepted.push(s);
    sockets.push(s);
  });
  await new Promise<void>((resolve) => app.listen(0, "127.0.0.1", resolve));
});
afterEach(async () => {
  await plane.stop();
  for (const s of sockets) s.destroy();
  await new Promise<void>((resolve) => app.close(() => resolve()));
});

/** A connection to the app, as a session's port would be, once the app accepted it. */
async function portConnection(): Promise<{ conn: Socket; appSide: Socket }> {
  const conn = connect({ host: "127.0.0.1", port: (app.address() as AddressInfo).port, allowHalfOpen: true });
  sockets.push(conn);
  await once(conn, "connect");
  while (accepted.length === 0) await new Promise((r) => setImmediate(r));
  return { conn, appSide: accepted.shift() as Socket };
}

function dial(offer: DataPlaneOffer, first?: Buffer): Socket {
  const s = connect({ host: offer.host, port: offer.port });
  sockets.push(s);
  // A refused one may be reset (closed with its bytes unread): its close is what the tests wait on.
  s.on("error", () => undefined);
  s.write(first ?? Buffer.from(offer.ticket, "base64url"));
  return s;
}

/** Resolves when s closed, reset or not (events.once would reject on the reset's error). */
function closed(s: Socket): Promise<void> {
  return new Promise((resolve) => s.once("close", () => resolve()));
}

async function read(s: Socket, bytes: number): Promise<string> {
  let got = Buffer.alloc(0);
  while (got.byteLength < bytes) got = Buffer.concat([got, (await once(s, "data"))[0] as Buffer]);
  return got.toString();
}

describe("the runner's data plane", () => {
  it("carries a port's bytes both ways for the gateway presenting its ticket, and says the session is in use", async () => {
    const { conn, appSide } = await portConnection();
    const offer = DataPlaneOffer.parse(plane.offer(conn, "ses_1"));
    expect(Buffer.from(offer.ticket, "base64url").byteLength).toBe(DATA_TICKET_BYTES);
    const gateway = dial(offer);
    gateway.write("GET / HTTP/1.1\r\n\r\n");
    expect(await read(appSide, 18)).toBe("GET / HTTP/1.1\r\n\r\n");
    appSide.write("HTTP/1.1 200 OK\r\n");
    expect(await read(gateway, 17)).toBe("HTTP/1.1 200 OK\r\n");
    expect(activity).toContain("ses_1");
    expect(plane.size).toBe(1);
    // The app closing ends the gateway's connection.
    appSide.end();
    await once(gateway, "end");
    gateway.destroy();
    await once(conn, "close");
  });

  it("takes a ticket once: a second connection with it is closed without a byte", async () => {
    const { conn, appSide } = await portConnection();
    const offer = DataPlaneOffer.parse(plane.offer(conn, "ses_1"));
    const first = dial(offer);
    first.write("x");
    // Carried: the ticket is spent.
    expect(await read(appSide, 1)).toBe("x");
    const second = dial(offer);
    const got: Buffer[] = [];
    second.on("data", (b: Buffer) => got.push(b));
    await closed(second);
    expect(got).toEqual([]);
    first.destroy();
  });

  it("closes a connection naming no ticket, and leaves the waiting one alone", async () => {
    const { conn } = await portConnection();
    const offer = DataPlaneOffer.parse(plane.offer(conn, "ses_1"));
    const guess = dial(offer, Buffer.alloc(DATA_TICKET_BYTES, 7));
    await closed(guess);
    expect(plane.size).toBe(1);
    expect(conn.destroyed).toBe(false);
    // Garbage shorter than a ticket, then silence: closed when the preamble's time is up.
    const slow = connect({ host: offer.host, port: offer.port });
    sockets.push(slow);
    slow.on("error", () => undefined);
    slow.write("GET /");
    await once(slow, "connect");
    while (timers.size < 2) await new Promise((r) => setImmediate(r));
    timers.fire(DATA_PREAMBLE_TIMEOUT_MS);
    await closed(slow);
    expect(conn.destroyed).toBe(false);
  });

  it("lets go of a port's connection whose ticket was never used in time", async () => {
    const { conn } = await portConnection();
    plane.offer(conn, "ses_1");
    timers.fire(DATA_TICKET_TTL_MS);
    await once(conn, "close");
    expect(plane.size).toBe(0);
  });

  it("forgets a ticket whose port's connection broke while it waited", async () => {
    const conn = new PassThrough();
    plane.offer(conn, "ses_1");
    expect(plane.size).toBe(1);
    conn.destroy();
    await once(conn, "close");
    expect(plane.size).toBe(0);
    expect(timers.size).toBe(0);
  });

  it("offers nothing once stopped, and ends what it carried", async () => {
    const { conn, appSide } = await portConnection();
    const gateway = dial(DataPlaneOffer.parse(plane.offer(conn, "ses_1")));
    gateway.write("x");
    expect(await read(appSide, 1)).toBe("x");
    await plane.stop();
    await closed(gateway);
    expect(plane.offer(new PassThrough(), "ses_1")).toBeUndefined();
  });

  describe("a socket offered to one taker (a file's bytes)", () => {
    /** A taker that records what it is given. */
    function recordingTaker() {
      let dropped = 0;
      const taken: Array<{ socket: Socket; early: Buffer }> = [];
      let onTake: (() => void) | undefined;
      return {
        taker: {
          take: (socket: Socket, early: Buffer) => {
            taken.push({ socket, early });
            onTake?.();
          },
          drop: () => void dropped++,
        },
        taken,
        get dropped() {
          return dropped;
        },
        next: () => new Promise<void>((resolve) => (onTake = resolve)),
      };
    }

    it("hands the dialled socket itself, paused, with the bytes that came with the ticket, and says the session is in use", async () => {
      const t = recordingTaker();
      const offer = DataPlaneOffer.parse(plane.offerSocket(t.taker, "ses_2"));
      const took = t.next();
      const gateway = connect({ host: offer.host, port: offer.port });
      sockets.push(gateway);
      gateway.write(Buffer.concat([Buffer.from(offer.ticket, "base64url"), Buffer.from("early")]));
      await took;
      const [{ socket, early }] = t.taken as [{ socket: Socket; early: Buffer }];
      expect(early.toString()).toBe("early");
      expect(socket.isPaused()).toBe(true);
      expect(activity).toContain("ses_2");
      // Both ways are the taker's: what it writes reaches the gateway, what the gateway writes is its to read.
      socket.write("answer");
      expect(await read(gateway, 6)).toBe("answer");
      gateway.write("more");
      const reading = read(socket, 4);
      socket.resume();
      expect(await reading).toBe("more");
      expect(t.dropped).toBe(0);
      // A ticket once: a second dial with it is closed without reaching the taker.
      const again = dial(offer);
      await closed(again);
      expect(t.taken).toHaveLength(1);
    });

    it("drops the taker whose ticket was never used in time, and every waiting one on stop", async () => {
      const late = recordingTaker();
      plane.offerSocket(late.taker, "ses_2");
      expect(plane.size).toBe(1);
      timers.fire(DATA_TICKET_TTL_MS);
      expect([late.dropped, plane.size]).toEqual([1, 0]);
      const waiting = recordingTaker();
      plane.offerSocket(waiting.taker, "ses_2");
      await plane.stop();
      expect(waiting.dropped).toBe(1);
      expect(plane.offerSocket(recordingTaker().taker, "ses_2")).toBeUndefined();
    });
  });
});
