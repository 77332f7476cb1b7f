import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { gunzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { looksIncompressible, parallelGzip } from "./parallel-gzip.ts";

async function gzipAll(chunks: Buffer[], opts?: Parameters<typeof parallelGzip>[0]): Promise<Buffer> {
  return Buffer.concat(await Readable.from(chunks).pipe(parallelGzip(opts)).toArray());
}

const text = (bytes: number) => Buffer.from(Array.from({ length: Math.ceil(bytes / 40) }, (_, i) => `line ${i}: const value = compute(${i});\n`).join("")).subarray(0, bytes);

describe("parallelGzip", () => {
  it("writes members in input order that any gunzip reads back byte for byte", async () => {
    // Blocks of text and of random bytes, cut into odd-sized writes across block boundaries.
    const input = Buffer.concat([text(300_000), randomBytes(250_000), text(123_457)]);
    const writes: Buffer[] = [];
    for (let at = 0; at < input.length; at += 77_777) writes.push(input.subarray(at, at + 77_777));
    const out = await gzipAll(writes, { blockBytes: 64 * 1024, maxInFlight: 3 });
    expect(gunzipSync(out).equals(input)).toBe(true);
    // GNU gzip reads the concatenated members too (what `tar -xz` on a pulled archive does).
    expect(execFileSync("gzip", ["-dc"], { input: out }).equals(input)).toBe(true);
    // Text shrinks; the random part is stored rather than deflated, so it costs its size.
    expect(out.length).toBeLessThan(250_000 + 200_000);
  });

  it("an empty input is one empty member, still a valid gzip stream", async () => {
    const out = await gzipAll([]);
    expect(out.length).toBeGreaterThan(0);
    expect(gunzipSync(out).length).toBe(0);
  });

  it("judges random bytes incompressible and text not; small blocks are always compressed", () => {
    expect(looksIncompressible(randomBytes(256 * 1024))).toBe(true);
    expect(looksIncompressible(text(256 * 1024))).toBe(false);
    expect(looksIncompressible(Buffer.alloc(256 * 1024))).toBe(false);
    expect(looksIncompressible(randomBytes(1000))).toBe(false);
  });
});
