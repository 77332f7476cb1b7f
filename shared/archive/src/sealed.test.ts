import { randomBytes } from "node:crypto";
import { Readable, Writable, type Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { describe, expect, it } from "vitest";
import { FRAME_BYTES, newSealKey, SealError, sealKeyFrom, sealStream, unsealStream } from "./sealed.ts";

async function collect(source: Readable, transform: Transform): Promise<Buffer> {
  const out: Buffer[] = [];
  await pipeline(source, transform, new Writable({ write: (c: Buffer, _e, cb) => (out.push(c), cb()) }));
  return Buffer.concat(out);
}

/** Feeds `data` in pieces of `piece` bytes, as a network stream would. */
function pieces(data: Buffer, piece = 7_777): Readable {
  const parts: Buffer[] = [];
  for (let i = 0; i < data.length; i += piece) parts.push(data.subarray(i, i + piece));
  return Readable.from(parts.length > 0 ? parts : [Buffer.alloc(0)]);
}

const seal = (data: Buffer, key: Buffer, context = "ws/s1/1-a") => collect(pieces(data), sealStream(key, context));
const open = (sealed: Buffer, key: Buffer, context = "ws/s1/1-a") => collect(pieces(sealed, 5_000), unsealStream(key, context));

/** Splits a sealed object into its frames (header + ciphertext + tag each). */
function frames(sealed: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < sealed.length; ) {
    const total = 5 + sealed.readUInt32BE(at + 1) + 16;
    out.push(sealed.subarray(at, at + total));
    at += total;
  }
  return out;
}

describe("sealed objects", () => {
  it("round-trips empty, small and multi-frame data, and the sealed bytes carry none of the plaintext", async () => {
    const key = newSealKey();
    for (const data of [Buffer.alloc(0), Buffer.from("hello"), Buffer.concat([Buffer.from("MARKER-PLAINTEXT"), randomBytes(3 * FRAME_BYTES + 123)])]) {
      const sealed = await seal(data, key);
      expect((await open(sealed, key)).equals(data)).toBe(true);
      expect(sealed.includes(Buffer.from("MARKER-PLAINTEXT"))).toBe(false);
    }
  });

  it("refuses a wrong key, another object's context, a flipped bit, a cut object, reordered frames and trailing bytes", async () => {
    const key = newSealKey();
    const data = randomBytes(2 * FRAME_BYTES + 10);
    const sealed = await seal(data, key);
    const refused = (p: Promise<unknown>) => expect(p).rejects.toBeInstanceOf(SealError);
    await refused(open(sealed, newSealKey()));
    await refused(open(sealed, key, "ws/s2/1-a"));
    const flipped = Buffer.from(sealed);
    flipped[100] = (flipped[100] ?? 0) ^ 1;
    await refused(open(flipped, key));
    const [f0, f1, f2] = frames(sealed);
    expect(f2).toBeDefined();
    await refused(open(Buffer.concat([f0!, f1!]), key)); // no final frame
    await refused(open(Buffer.concat([f1!, f0!, f2!]), key));
    await refused(open(Buffer.concat([sealed, f2!]), key));
    await refused(open(sealed.subarray(0, sealed.length - 3), key));
    // The final flag is authenticated: setting it on the first frame does not end the object early.
    const early = Buffer.from(f0!);
    early[0] = 1;
    await refused(open(early, key));
  });

  it("parses keys carried as base64 and refuses anything but 32 bytes", () => {
    const key = newSealKey();
    expect(sealKeyFrom(key.toString("base64")).equals(key)).toBe(true);
    for (const bad of ["", "AAAA", randomBytes(31).toString("base64"), randomBytes(33).toString("base64"), `${key.toString("base64").slice(0, -2)}!!`]) {
      expect(() => sealKeyFrom(bad)).toThrow(SealError);
    }
    expect(() => sealStream(Buffer.alloc(16), "x")).toThrow(SealError);
  });
});
