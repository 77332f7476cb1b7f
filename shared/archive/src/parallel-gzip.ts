/**
 * gzip in parallel: the input is cut into blocks, each compressed as a gzip
 * member of its own in the libuv pool, several at a time, and the members are
 * written in input order. Concatenated members are one valid gzip stream (RFC
 * 1952 §2.2; `gunzip`, `tar -xz` and Node's Gunzip read them all). A single
 * deflate stream runs on one core at ~40 MB/s on this machine at level 1 and
 * was most of a 100 MB checkpoint's time; each block restarts the dictionary,
 * which costs well under 1 % of size at 1 MiB blocks.
 */
import { Transform, type TransformCallback } from "node:stream";
import { promisify } from "node:util";
import { constants as zlibConstants, gzip } from "node:zlib";

const gzipAsync = promisify(gzip);

/**
 * Output room beyond a block's own size: a stored (level 0) member grows by
 * 5 bytes per 64 KiB plus its header and trailer, so one output buffer holds
 * any member and each block is compressed in a single pool job (zlib's
 * default 16 KiB output chunks made it one job per 16 KiB).
 */
const MEMBER_SLACK_BYTES = 64 * 1024;

export interface ParallelGzipOptions {
  /** zlib level (default: fastest). */
  level?: number;
  /** Input bytes per member (default 1 MiB). */
  blockBytes?: number;
  /** Members being compressed at once (default 4, libuv's default pool size). */
  maxInFlight?: number;
}

export function parallelGzip(opts: ParallelGzipOptions = {}): Transform {
  const level = opts.level ?? zlibConstants.Z_BEST_SPEED;
  const blockBytes = opts.blockBytes ?? 1024 * 1024;
  const maxInFlight = Math.max(1, opts.maxInFlight ?? 4);
  let parts: Buffer[] = [];
  let size = 0;
  let emitted = false;
  const queue: Array<Promise<Buffer>> = [];

  const enqueue = (block: Buffer): void => {
    // Already-compressed data (archives, images, git packs) is stored, not deflated: same bytes, a fraction of the CPU.
    const member = gzipAsync(block, { level: looksIncompressible(block) ? zlibConstants.Z_NO_COMPRESSION : level, chunkSize: block.length + MEMBER_SLACK_BYTES });
    // Rejections are taken by drain; this only keeps an early one from being unhandled meanwhile.
    member.catch(() => undefined);
    queue.push(member);
  };

  const stream: Transform = new Transform({
    transform(chunk: Buffer, _enc, done: TransformCallback) {
      parts.push(chunk);
      size += chunk.length;
      if (size >= blockBytes) {
        const all = Buffer.concat(parts, size);
        let at = 0;
        for (; all.length - at >= blockBytes; at += blockBytes) enqueue(all.subarray(at, at + blockBytes));
        parts = at < all.length ? [all.subarray(at)] : [];
        size = all.length - at;
      }
      drain(maxInFlight - 1).then(() => done(), done);
    },
    flush(done: TransformCallback) {
      // An empty input still yields one (empty) member: a gzip stream is never zero bytes.
      if (size > 0 || (!emitted && queue.length === 0)) enqueue(Buffer.concat(parts, size));
      parts = [];
      size = 0;
      drain(0).then(() => done(), done);
    },
  });

  /** Writes finished members, in order, until at most `keep` are in flight. */
  async function drain(keep: number): Promise<void> {
    while (queue.length > keep) {
      const member = await (queue.shift() as Promise<Buffer>);
      emitted = true;
      stream.push(member);
    }
  }

  return stream;
}

/** Bytes sampled per block to judge it. */
const SAMPLE_BYTES = 8 * 1024;
/** Shannon entropy (bits per byte) above which deflate saves next to nothing. */
const INCOMPRESSIBLE_BITS = 7.9;

/**
 * Whether a block looks like compressed or random data: the byte entropy of
 * samples from its start, middle and end. Text and code sit far below 7.9
 * bits per byte; a miss only costs compression ratio, never correctness.
 */
export function looksIncompressible(block: Buffer): boolean {
  if (block.length < 3 * SAMPLE_BYTES) return false;
  const counts = new Uint32Array(256);
  for (const start of [0, (block.length >> 1) - (SAMPLE_BYTES >> 1), block.length - SAMPLE_BYTES]) {
    for (let i = start; i < start + SAMPLE_BYTES; i++) counts[block[i] as number]! += 1;
  }
  const total = 3 * SAMPLE_BYTES;
  let bits = 0;
  for (const c of counts) {
    if (c === 0) continue;
    const p = c / total;
    bits -= p * Math.log2(p);
  }
  return bits > INCOMPRESSIBLE_BITS;
}
