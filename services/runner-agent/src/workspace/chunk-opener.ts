import { createDecipheriv } from "node:crypto";
import { Worker } from "node:worker_threads";

/** A sealed chunk's layout (chunk-store.ts): random IV in front, GCM tag at the end. */
export const IV_BYTES = 12;
export const TAG_BYTES = 16;

/** Opens a sealed chunk with its key: its plain bytes, or a throw when the bytes or the tag do not match the key. */
export function openSealed(sealed: Uint8Array, key: Buffer): Buffer {
  const bytes = Buffer.from(sealed.buffer, sealed.byteOffset, sealed.byteLength);
  const decipher = createDecipheriv("aes-256-gcm", key, bytes.subarray(0, IV_BYTES));
  decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
  const opened = decipher.update(bytes.subarray(IV_BYTES, bytes.length - TAG_BYTES));
  // GCM's final() checks the tag and returns nothing: no concatenation (a second copy of the chunk) needed.
  const rest = decipher.final();
  return rest.length === 0 ? opened : Buffer.concat([opened, rest]);
}

/**
 * The worker's whole program: openSealed's steps, with the plain bytes
 * handed back without a copy. Plain CommonJS evaluated as a string, so the
 * runner's build has no second entry to bundle; it needs nothing but Node.
 */
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const { createDecipheriv } = require("node:crypto");
parentPort.on("message", (m) => {
  try {
    const sealed = Buffer.from(m.buffer, m.offset, m.length);
    const decipher = createDecipheriv("aes-256-gcm", Buffer.from(m.key), sealed.subarray(0, ${IV_BYTES}));
    decipher.setAuthTag(sealed.subarray(sealed.length - ${TAG_BYTES}));
    let plain = decipher.update(sealed.subarray(${IV_BYTES}, sealed.length - ${TAG_BYTES}));
    const rest = decipher.final();
    if (rest.length > 0) plain = Buffer.concat([plain, rest]);
    // Only an array the bytes fill alone is handed over (a pooled one is shared): else a copy that is.
    if (plain.byteOffset !== 0 || plain.buffer.byteLength !== plain.length) plain = Buffer.from(new Uint8Array(plain));
    parentPort.postMessage({ id: m.id, buffer: plain.buffer, length: plain.length }, [plain.buffer]);
  } catch (err) {
    parentPort.postMessage({ id: m.id, error: err instanceof Error ? err.message : String(err) });
  }
});
`;

/**
 * Past this size a message's payload cannot have come in one socket read
 * (Node reads 64 KiB at a time), so the NATS client gathered it in an array
 * of its own (patches/@nats-io__nats-core: the payload's headers, then its
 * bytes, and nothing else): one ending with the chunk may be handed to the
 * worker whole. A smaller one may share its array with other messages and is
 * copied first.
 */
const HAND_OVER_MIN_BYTES = 256 * 1024;

function handedOverWhole(sealed: Uint8Array): boolean {
  return sealed.buffer instanceof ArrayBuffer && sealed.byteLength >= HAND_OVER_MIN_BYTES && sealed.byteOffset + sealed.byteLength === sealed.buffer.byteLength;
}

type Reply = { id: number; buffer: ArrayBuffer; length: number } | { id: number; error: string };

/** An opener's worker, gone this long without a chunk to open, ends (the next chunk starts another). */
export const OPENER_IDLE_MS = 5_000;

/**
 * Opens sealed checkpoint chunks on a worker thread: a restore's AES-GCM
 * (~0.85 s per GB on a 2-core VM) then overlaps the main thread's fetching,
 * extracting and writing instead of adding to them. The sealed bytes go to
 * the worker without a copy when their array holds nothing else (a chunk
 * gathered across socket reads), and the plain bytes come back the same way.
 * A worker that fails fails the chunks it had; the next one starts another.
 */
export class ChunkOpener {
  private worker: Worker | undefined;
  private readonly waiting = new Map<number, { resolve: (plain: Buffer) => void; reject: (err: Error) => void }>();
  private nextId = 1;
  private idle: NodeJS.Timeout | undefined;

  constructor(private readonly idleMs = OPENER_IDLE_MS) {}

  open(sealed: Uint8Array, key: Buffer): Promise<Buffer> {
    const worker = this.ensure();
    const id = this.nextId++;
    const own = handedOverWhole(sealed) ? sealed : new Uint8Array(sealed);
    const buffer = own.buffer as ArrayBuffer;
    return new Promise<Buffer>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      // The key in an array of its own: a small Buffer is a view of Node's shared pool, which a clone would copy whole.
      worker.postMessage({ id, buffer, offset: own.byteOffset, length: own.byteLength, key: new Uint8Array(key) }, [buffer]);
    });
  }

  /** Ends the worker now (chunks still being opened fail). */
  async stop(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    this.failAll(new Error("the chunk opener stopped"));
    await worker?.terminate();
  }

  private ensure(): Worker {
    if (this.idle) clearTimeout(this.idle);
    this.idle = undefined;
    if (this.worker) return this.worker;
    const worker = new Worker(WORKER_SOURCE, { eval: true });
    worker.unref();
    worker.on("message", (reply: Reply) => this.settle(reply));
    const lost = (err: Error) => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      this.failAll(err);
    };
    worker.on("error", lost);
    worker.on("exit", (code) => lost(new Error(`the chunk opener's worker exited (${code})`)));
    this.worker = worker;
    return worker;
  }

  private settle(reply: Reply): void {
    const waiter = this.waiting.get(reply.id);
    if (!waiter) return;
    this.waiting.delete(reply.id);
    if ("error" in reply) waiter.reject(new Error(reply.error));
    else waiter.resolve(Buffer.from(reply.buffer, 0, reply.length));
    if (this.waiting.size === 0) this.idle = setTimeout(() => void this.stop(), this.idleMs).unref();
  }

  private failAll(err: Error): void {
    for (const w of this.waiting.values()) w.reject(err);
    this.waiting.clear();
  }
}
