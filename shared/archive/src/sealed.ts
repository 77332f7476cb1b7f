/**
 * Sealed objects: an archive encrypted and authenticated with a key of its
 * own before it goes into a shared object store (checkpoints, environment
 * snapshots, workspace transfers). Every runner's NATS user can read and
 * replace objects there (object names are not in subjects), so the store is
 * treated as untrusted: without the object's key its bytes say nothing, and a
 * replaced, truncated, reordered or swapped-in object fails to open.
 *
 * Format: frames of `[flags:1][length:4 BE][ciphertext:length][tag:16]`, each
 * AES-256-GCM over at most FRAME_BYTES of plaintext. The nonce is the frame
 * index (the key is never reused across objects); the additional data binds
 * the object's context (its name), the index and the flags, whose `final` bit
 * marks the last frame, so a cut object is refused rather than read short.
 */
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { pipeline, Transform, type Readable, type TransformCallback } from "node:stream";

/** The format name of a sealed gzipped tar (Checkpoint.format). */
export const SEALED_ARCHIVE_FORMAT = "tar+gzip+aes256gcm";
/** A sealed plain tar: checkpoints of runners set not to compress (faster where the store is near, larger). */
export const SEALED_TAR_FORMAT = "tar+aes256gcm";

export const SEAL_KEY_BYTES = 32;
/** Plaintext per frame. */
export const FRAME_BYTES = 256 * 1024;
const HEADER_BYTES = 5;
const TAG_BYTES = 16;
const FINAL = 0x01;

export class SealError extends Error {
  readonly code = "sealed_object_invalid";
  constructor(message: string) {
    super(message);
    this.name = "SealError";
  }
}

/** A fresh random key for one object. */
export function newSealKey(): Buffer {
  return randomBytes(SEAL_KEY_BYTES);
}

/** Parses a key carried as base64 (contracts' SealKey); throws SealError when it is not 32 bytes. */
export function sealKeyFrom(base64: string): Buffer {
  const key = Buffer.from(base64, "base64");
  if (key.length !== SEAL_KEY_BYTES || key.toString("base64") !== base64) throw new SealError("seal key must be 32 bytes of base64");
  return key;
}

function nonceOf(index: number): Buffer {
  const nonce = Buffer.alloc(12);
  nonce.writeBigUInt64BE(BigInt(index), 4);
  return nonce;
}

function aadOf(context: string, index: number, flags: number): Buffer {
  const tail = Buffer.alloc(9);
  tail.writeBigUInt64BE(BigInt(index), 0);
  tail.writeUInt8(flags, 8);
  return Buffer.concat([Buffer.from(`paddock-sealed-v1\0${context}\0`, "utf8"), tail]);
}

function checkKey(key: Buffer): void {
  if (key.length !== SEAL_KEY_BYTES) throw new SealError("seal key must be 32 bytes");
}

/** Encrypts a byte stream into sealed frames. `context` (the object's name) must be given again to open it. */
export function sealStream(key: Buffer, context: string): Transform {
  checkKey(key);
  let index = 0;
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const frame = (plain: Buffer, flags: number): Buffer => {
    const cipher = createCipheriv("aes-256-gcm", key, nonceOf(index));
    cipher.setAAD(aadOf(context, index, flags));
    const ct = Buffer.concat([cipher.update(plain), cipher.final()]);
    const header = Buffer.alloc(HEADER_BYTES);
    header.writeUInt8(flags, 0);
    header.writeUInt32BE(ct.length, 1);
    index += 1;
    return Buffer.concat([header, ct, cipher.getAuthTag()]);
  };
  const take = (size: number): Buffer => {
    const all = Buffer.concat(pending);
    pending = all.length > size ? [all.subarray(size)] : [];
    pendingBytes = all.length - Math.min(size, all.length);
    return all.subarray(0, size);
  };
  return new Transform({
    transform(chunk: Buffer, _enc, done: TransformCallback) {
      pending.push(chunk);
      pendingBytes += chunk.length;
      // Keep at least one byte back: the last frame must carry the final flag.
      while (pendingBytes > FRAME_BYTES) this.push(frame(take(FRAME_BYTES), 0));
      done();
    },
    flush(done: TransformCallback) {
      this.push(frame(take(pendingBytes), FINAL));
      done();
    },
  });
}

/** Decrypts sealed frames, refusing anything that does not open under key and context, or stops short. */
export function unsealStream(key: Buffer, context: string): Transform {
  checkKey(key);
  let index = 0;
  let buffered: Buffer = Buffer.alloc(0);
  let finished = false;
  return new Transform({
    transform(chunk: Buffer, _enc, done: TransformCallback) {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      try {
        for (;;) {
          if (buffered.length < HEADER_BYTES) break;
          const flags = buffered.readUInt8(0);
          const length = buffered.readUInt32BE(1);
          if ((flags & ~FINAL) !== 0 || length > FRAME_BYTES) throw new SealError("sealed object is malformed");
          const total = HEADER_BYTES + length + TAG_BYTES;
          if (buffered.length < total) break;
          if (finished) throw new SealError("sealed object has bytes after its final frame");
          const decipher = createDecipheriv("aes-256-gcm", key, nonceOf(index));
          decipher.setAAD(aadOf(context, index, flags));
          decipher.setAuthTag(buffered.subarray(HEADER_BYTES + length, total));
          let plain: Buffer;
          try {
            plain = Buffer.concat([decipher.update(buffered.subarray(HEADER_BYTES, HEADER_BYTES + length)), decipher.final()]);
          } catch {
            throw new SealError("sealed object does not open with its key (altered, replaced or another object)");
          }
          buffered = buffered.subarray(total);
          index += 1;
          finished = (flags & FINAL) !== 0;
          if (plain.length > 0) this.push(plain);
        }
        done();
      } catch (err) {
        done(err as Error);
      }
    },
    flush(done: TransformCallback) {
      if (!finished || buffered.length > 0) done(new SealError("sealed object is truncated"));
      else done();
    },
  });
}

/**
 * source piped into transform, an error on either side destroying both
 * (unlike .pipe, which would leave the reader hanging on a failed source).
 */
function through(source: Readable, transform: Transform): Transform {
  pipeline(source, transform, () => undefined);
  return transform;
}

/** source, sealed under key for the object named context. */
export function sealed(source: Readable, key: Buffer, context: string): Readable {
  return through(source, sealStream(key, context));
}

/** source (a sealed object named context), opened with key; errors with SealError when it does not open. */
export function unsealed(source: Readable, key: Buffer, context: string): Readable {
  return through(source, unsealStream(key, context));
}
