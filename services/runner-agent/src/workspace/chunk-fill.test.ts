import { randomBytes } from "node:crypto";
import { closeSync, mkdtempSync, openSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { MANIFEST_CHUNK_BYTES } from "@paddock/contracts";
import { useNatsServer } from "@paddock/testing/vitest";
import { CheckpointError } from "../errors.ts";
import type { ChunkAddress } from "./chunk-fetch.ts";
import { ChunkFiller } from "./chunk-fill.ts";
import { addressOf, createChunkStore, sha256Url } from "./chunk-store.ts";
import { FillWorker } from "./fill-worker-host.ts";

const nats = useNatsServer();
const dir = mkdtempSync(join(tmpdir(), "paddock-fill-"));
const workers: FillWorker[] = [];
afterAll(() => Promise.all(workers.map((w) => w.stop())));

function fillWorker(opts: { idleMs?: number; servers?: string; onExit?: () => void } = {}): FillWorker {
  const w = new FillWorker({ bus: { servers: opts.servers ?? nats.url, name: "test-restore", validateOutgoing: true } }, { idleMs: opts.idleMs ?? 60_000, ...(opts.onExit ? { onExit: opts.onExit } : {}) });
  workers.push(w);
  return w;
}

/** Plain bytes stored as sealed chunks of MANIFEST_CHUNK_BYTES in a runner's stream, with their addresses. */
async function stored(runnerId: string, plain: Buffer): Promise<ChunkAddress[]> {
  const store = createChunkStore(nats.nc, { poolId: "p1", runnerId });
  const addresses: ChunkAddress[] = [];
  for (let at = 0; at < plain.length; at += MANIFEST_CHUNK_BYTES) {
    const part = plain.subarray(at, at + MANIFEST_CHUNK_BYTES);
    addresses.push(addressOf(await store.put(part, sha256Url(part))));
  }
  return addresses;
}

/** A new file's descriptor; fn fills it, then it is closed and read back. */
async function filled(name: string, fn: (fd: number) => Promise<void>): Promise<Buffer> {
  const path = join(dir, name);
  const fd = openSync(path, "wx");
  try {
    await fn(fd);
  } finally {
    closeSync(fd);
  }
  return readFileSync(path);
}

describe("FillWorker", () => {
  it("writes files from chunks in several runners' streams, many at once, on its own connection", async () => {
    const filler = fillWorker();
    const a = randomBytes(2 * MANIFEST_CHUNK_BYTES + 4321);
    const b = randomBytes(777);
    const [fromA, fromB] = [await stored("ra", a), await stored("rb", b)];
    const files = await Promise.all([
      filled("a.bin", (fd) => filler.fill(fd, fromA)),
      filled("b.bin", (fd) => filler.fill(fd, fromB)),
      filled("ab.bin", (fd) => filler.fill(fd, [...fromB, ...fromA])),
      filled("empty.bin", (fd) => filler.fill(fd, [])),
    ]);
    expect(files[0]?.equals(a)).toBe(true);
    expect(files[1]?.equals(b)).toBe(true);
    expect(files[2]?.equals(Buffer.concat([b, a]))).toBe(true);
    expect(files[3]?.length).toBe(0);
  });

  it("fills a tree of small files asked for at once", async () => {
    const filler = fillWorker();
    const plains = Array.from({ length: 300 }, (_, i) => randomBytes(50 + i));
    const chunks = await Promise.all(plains.map((p) => stored("rs", p)));
    const files = await Promise.all(chunks.map((c, i) => filled(`small-${i}`, (fd) => filler.fill(fd, c))));
    files.forEach((f, i) => expect(f.equals(plains[i] ?? Buffer.alloc(0))).toBe(true));
  });

  it("fails a fill whose chunk is gone or does not open with its key, and goes on filling others", async () => {
    const filler = fillWorker();
    const plain = randomBytes(1000);
    const [good] = await stored("rc", plain);
    if (!good) throw new Error("nothing stored");
    const gone = { ...good, subject: `${good.subject.slice(0, good.subject.lastIndexOf("."))}.nothing-here` };
    const wrongKey = { ...good, key: randomBytes(32).toString("base64") };
    const longer = { ...good, bytes: good.bytes + 1 };
    await expect(filled("gone", (fd) => filler.fill(fd, [good, gone]))).rejects.toThrow(new CheckpointError("checkpoint chunk not found"));
    await expect(filled("wrong-key", (fd) => filler.fill(fd, [wrongKey]))).rejects.toThrow(/does not open with its key/);
    await expect(filled("longer", (fd) => filler.fill(fd, [longer]))).rejects.toThrow(/does not open with its key/);
    expect((await filled("after", (fd) => filler.fill(fd, [good]))).equals(plain)).toBe(true);
  });

  it("fails fills in flight when stopped; the next fill starts another worker, as after an idle end", async () => {
    let exits = 0;
    let exited = () => undefined as void;
    const filler = fillWorker({ idleMs: 0, onExit: () => (exits++, exited()) });
    const plain = randomBytes(3 * MANIFEST_CHUNK_BYTES);
    const chunks = await stored("rd", plain);
    const inFlight = filled("stopped", (fd) => filler.fill(fd, chunks));
    await filler.stop();
    await expect(inFlight).rejects.toThrow(/restore worker stopped/);
    expect(exits).toBe(1);
    const idleEnd = new Promise<void>((resolve) => (exited = resolve));
    expect((await filled("restarted", (fd) => filler.fill(fd, chunks))).equals(plain)).toBe(true);
    // Idle after that fill: the worker closes its connection and ends; the next fill starts another.
    await idleEnd;
    expect(exits).toBe(2);
    expect((await filled("after-idle", (fd) => filler.fill(fd, chunks))).equals(plain)).toBe(true);
  });

  it("fails (never hangs) when its connection cannot be made", async () => {
    const filler = fillWorker({ servers: "nats://127.0.0.1:1" });
    const [chunk] = await stored("re", randomBytes(10));
    if (!chunk) throw new Error("nothing stored");
    const err = await filled("unreachable", (fd) => filler.fill(fd, [chunk])).catch((e: unknown) => e);
    // The worker's own reason, not only that it ended.
    expect(err).toBeInstanceOf(CheckpointError);
    expect((err as Error).message).toMatch(/connection refused/);
  });
});

describe("ChunkFiller", () => {
  it("fetches at most its window ahead across files, writes each piece at its offset, and fails only the file whose piece failed", async () => {
    const waiting: Array<{ chunk: ChunkAddress; settle: (r: Buffer | Error) => void }> = [];
    let most = 0;
    const fetch = (chunk: ChunkAddress) =>
      new Promise<Buffer>((resolve, reject) => {
        waiting.push({ chunk, settle: (r) => (r instanceof Error ? reject(r) : resolve(r)) });
        most = Math.max(most, waiting.length);
      });
    const filler = new ChunkFiller(fetch, 2);
    const piece = (name: string, bytes: number): ChunkAddress => ({ stream: "s", subject: name, key: "", bytes });
    const one = filled("window-one", (fd) => filler.fill(fd, [piece("1a", 3), piece("1b", 2)]));
    const two = filled("window-two", (fd) => filler.fill(fd, [piece("2a", 4), piece("2b", 1)]));
    // Settled out of order, a window of 2: each answer lets one more fetch start.
    const answer = (subject: string, r: Buffer | Error) => {
      const i = waiting.findIndex((w) => w.chunk.subject === subject);
      const [w] = waiting.splice(i, 1);
      w?.settle(r);
    };
    await Promise.resolve();
    expect(waiting.map((w) => w.chunk.subject)).toEqual(["1a", "1b"]);
    answer("1b", Buffer.from("yz"));
    await Promise.resolve();
    answer("1a", Buffer.from("abc"));
    await Promise.resolve();
    answer("2a", new Error("gone"));
    await Promise.resolve();
    expect(waiting.map((w) => w.chunk.subject)).toEqual(["2b"]);
    answer("2b", Buffer.from("!"));
    expect((await one).toString()).toBe("abcyz");
    await expect(two).rejects.toThrow("gone");
    expect(readFileSync(join(dir, "window-two")).length).toBe(0);
    expect(most).toBe(2);
  });
});
