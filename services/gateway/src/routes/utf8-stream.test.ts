import { describe, expect, it } from "vitest";
import { completeLength, Utf8Stream } from "./utf8-stream.ts";

/** A seeded generator: the same pieces every run. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** Bytes mixing ASCII, valid 2-, 3- and 4-byte sequences, and invalid ones (lone continuations, cut leads, overlongs, surrogates, 0xF5–0xFF). */
function mixedBytes(next: () => number, length: number): Buffer {
  const valid = ["a", "\n", "é", "€", "한", "😀", "\u0000"].map((c) => Buffer.from(c, "utf8"));
  const invalid = [[0x80], [0xbf], [0xc0, 0xaf], [0xc2], [0xe2, 0x82], [0xed, 0xa0, 0x80], [0xf0, 0x80, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xf5], [0xff], [0xf0, 0x9f, 0x98]].map((b) => Buffer.from(b));
  const parts: Buffer[] = [];
  let size = 0;
  while (size < length) {
    const pool = next() < 0.8 ? valid : invalid;
    const part = pool[Math.floor(next() * pool.length)] as Buffer;
    parts.push(part);
    size += part.length;
  }
  return Buffer.concat(parts);
}

/** bytes in pieces cut at random points, decoded as the stream decoder does. */
function decodedInPieces(bytes: Buffer, next: () => number): string {
  const stream = new Utf8Stream();
  let out = "";
  for (let at = 0; at < bytes.length; ) {
    const len = 1 + Math.floor(next() * 9);
    out += stream.decode(bytes.subarray(at, at + len));
    at += len;
  }
  return out + stream.end();
}

describe("UTF-8 decoding in pieces", () => {
  it("gives the text TextDecoder gives for the whole, however the bytes are cut, valid or not", () => {
    for (let seed = 1; seed <= 300; seed++) {
      const next = rng(seed);
      const bytes = mixedBytes(next, 1 + Math.floor(next() * 64));
      expect([seed, decodedInPieces(bytes, next)]).toEqual([seed, new TextDecoder().decode(bytes)]);
    }
  });

  it("keeps a sequence cut at a piece's end for the next piece, and nothing else", () => {
    const euro = Buffer.from("€", "utf8");
    expect(completeLength(Buffer.from([0x61, ...euro.subarray(0, 2)]))).toBe(1);
    expect(completeLength(Buffer.from([0x61, ...euro]))).toBe(4);
    expect(completeLength(Buffer.from([0xf0, 0x9f, 0x98]))).toBe(0);
    expect(completeLength(Buffer.from([0x61, 0x80]))).toBe(2);
    expect(completeLength(Buffer.alloc(0))).toBe(0);
    const stream = new Utf8Stream();
    expect(stream.decode(Buffer.from([0x61, 0xe2]))).toBe("a");
    expect(stream.decode(Buffer.from([0x82]))).toBe("");
    expect(stream.decode(Buffer.from([0xac, 0x62]))).toBe("€b");
    // A cut sequence left at the end is one replacement character, as TextDecoder's flush gives.
    expect(stream.decode(Buffer.from([0xe2, 0x82]))).toBe("");
    expect(stream.end()).toBe("\ufffd");
    expect(stream.end()).toBe("");
  });
});
