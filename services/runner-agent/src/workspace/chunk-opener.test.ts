import { createCipheriv, randomBytes } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { ChunkOpener, IV_BYTES, openSealed } from "./chunk-opener.ts";

/** A chunk sealed as chunk-store.ts seals one: IV, ciphertext, GCM tag. */
function seal(plain: Buffer, key: Buffer): Buffer {
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv("aes-256-gcm", key, iv);
  return Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
}

/** The sealed bytes in an array of their own, as the NATS client gathers a large message (headers in front). */
function asGathered(sealed: Buffer, headerBytes: number): Uint8Array {
  const all = new Uint8Array(headerBytes + sealed.length);
  all.set(sealed, headerBytes);
  return all.subarray(headerBytes);
}

const opener = new ChunkOpener();
afterAll(() => opener.stop());

describe("ChunkOpener", () => {
  it("opens what openSealed opens; a large chunk's array is handed over, a small one's left as it was", async () => {
    const key = randomBytes(32);
    const large = randomBytes(1024 * 1024);
    const small = randomBytes(1000);
    const largeSealed = asGathered(seal(large, key), 120);
    const smallSealed = seal(small, key);
    expect(openSealed(largeSealed, key).equals(large)).toBe(true);
    const [openedLarge, openedSmall] = await Promise.all([opener.open(largeSealed, key), opener.open(smallSealed, key)]);
    expect(openedLarge.equals(large)).toBe(true);
    expect(openedSmall.equals(small)).toBe(true);
    // Handed over: the caller's view of the sealed bytes is gone (no copy was made); the small one was copied.
    expect(largeSealed.byteLength).toBe(0);
    expect(smallSealed.byteLength).toBe(small.length + 28);
  });

  it("copies a large chunk whose array holds more than it (it may be shared)", async () => {
    const key = randomBytes(32);
    const plain = randomBytes(512 * 1024);
    const sealed = seal(plain, key);
    const shared = new Uint8Array(sealed.length + 64);
    shared.set(sealed, 0);
    const view = shared.subarray(0, sealed.length);
    expect((await opener.open(view, key)).equals(plain)).toBe(true);
    expect(shared.byteLength).toBe(sealed.length + 64);
  });

  it("refuses a chunk sealed with another key or altered, and goes on opening others", async () => {
    const key = randomBytes(32);
    const plain = randomBytes(300 * 1024);
    await expect(opener.open(seal(plain, key), randomBytes(32))).rejects.toThrow(/authenticate/);
    const altered = seal(plain, key);
    altered[IV_BYTES + 5] = (altered[IV_BYTES + 5] ?? 0) ^ 1;
    await expect(opener.open(altered, key)).rejects.toThrow(/authenticate/);
    expect((await opener.open(seal(plain, key), key)).equals(plain)).toBe(true);
  });

  it("fails the chunks in flight when stopped; the next chunk starts another worker, as after an idle stop", async () => {
    const own = new ChunkOpener(0);
    const key = randomBytes(32);
    const plain = randomBytes(64 * 1024);
    // Idle at once after each: every open below starts a worker of its own.
    expect((await own.open(seal(plain, key), key)).equals(plain)).toBe(true);
    expect((await own.open(seal(plain, key), key)).equals(plain)).toBe(true);
    const inFlight = expect(own.open(seal(plain, key), key)).rejects.toThrow(/stopped/);
    await own.stop();
    await inFlight;
    expect((await own.open(seal(plain, key), key)).equals(plain)).toBe(true);
    await own.stop();
  });
});
