import { Worker } from "node:worker_threads";
import type { BusConnectOptions } from "@paddock/bus/nats-options";
import { CheckpointError } from "../errors.ts";
import type { ChunkAddress } from "./chunk-fetch.ts";
import type { FileFiller } from "./chunk-fill.ts";

/** What the worker starts with: how to connect (the runner's own credentials). */
export interface FillWorkerData {
  bus: BusConnectOptions;
}

export type ToFillWorker = { op: "fill"; id: number; fd: number; chunks: readonly ChunkAddress[] } | { op: "close" };
export type FromFillWorker = { id: number; error?: string };

/** A restore worker gone this long without a file to fill ends (the next restore starts another). */
export const FILL_WORKER_IDLE_MS = 5_000;

/** How long a closing worker may take to end its connection before it is terminated. */
const CLOSE_GRACE_MS = 1_000;

function workerEntry(): URL {
  return import.meta.url.endsWith(".ts") ? new URL("./fill-worker-dev.mjs", import.meta.url) : new URL("./fill-worker.js", import.meta.url);
}

/** Restore workers at once: one thread receiving, opening and writing is the bound of a restore; two use both cores of a small host. */
export const FILL_THREADS = 2;

/**
 * Restores' file bytes written on worker threads, each with a NATS
 * connection of its own (decision 0067): a worker fetches each chunk of a
 * file, opens it and writes it by the descriptor the extraction opened. A
 * gigabyte of chunks then never passes through the runner's event loop or
 * its heap, whose size made every collection the chunks' memory set off
 * cost tens of milliseconds. Each file goes to the worker with the fewest
 * files in hand. Workers start on the first fill and end after
 * FILL_WORKER_IDLE_MS without one. A fill settles only once its worker
 * wrote its last byte or its thread ended: the caller may then close the
 * descriptor.
 */
export class FillWorker implements FileFiller {
  private readonly threads: Array<{ worker: Worker | undefined; held: number }>;
  private readonly waiting = new Map<number, { thread: number; resolve: () => void; reject: (err: Error) => void }>();
  private nextId = 1;
  private idle: NodeJS.Timeout | undefined;

  constructor(
    private readonly data: FillWorkerData,
    private readonly opts: { idleMs?: number; entry?: URL; threads?: number; onExit?: () => void } = {},
  ) {
    this.threads = Array.from({ length: opts.threads ?? FILL_THREADS }, () => ({ worker: undefined, held: 0 }));
  }

  fill(fd: number, chunks: readonly ChunkAddress[]): Promise<void> {
    if (this.idle) clearTimeout(this.idle);
    this.idle = undefined;
    let thread = 0;
    for (let i = 1; i < this.threads.length; i++) if ((this.threads[i]?.held ?? 0) < (this.threads[thread]?.held ?? 0)) thread = i;
    const worker = this.started(thread);
    const id = this.nextId++;
    return new Promise<void>((resolve, reject) => {
      this.waiting.set(id, { thread, resolve, reject });
      this.heldBy(thread, 1);
      worker.postMessage({ op: "fill", id, fd, chunks } satisfies ToFillWorker);
    });
  }

  /** Ends the workers now; fills in flight fail once the threads have ended (no write of theirs is left then). */
  async stop(): Promise<void> {
    if (this.idle) clearTimeout(this.idle);
    this.idle = undefined;
    const workers = this.threads.map((t) => t.worker);
    for (const t of this.threads) t.worker = undefined;
    await Promise.all(workers.map((w) => (w ? w.terminate() : Promise.resolve(0))));
    this.fail(() => true, new CheckpointError("the restore worker stopped"));
  }

  private heldBy(thread: number, delta: number): void {
    const t = this.threads[thread];
    if (t) t.held += delta;
  }

  private started(thread: number): Worker {
    const slot = this.threads[thread] as { worker: Worker | undefined };
    if (slot.worker) return slot.worker;
    const worker = new Worker(this.opts.entry ?? workerEntry(), { workerData: this.data });
    worker.unref();
    worker.on("message", (m: FromFillWorker) => this.settle(m));
    // Fills fail on exit only: an error event comes before the thread has ended, and a write of theirs may still land.
    worker.on("exit", (code) => {
      this.opts.onExit?.();
      if (slot.worker !== worker) return;
      slot.worker = undefined;
      this.fail((w) => w.thread === thread, new CheckpointError(`the restore worker exited (${code})`));
    });
    worker.on("error", () => undefined);
    slot.worker = worker;
    return worker;
  }

  private settle(m: FromFillWorker): void {
    const waiter = this.waiting.get(m.id);
    if (!waiter) return;
    this.waiting.delete(m.id);
    this.heldBy(waiter.thread, -1);
    if (m.error !== undefined) waiter.reject(new CheckpointError(m.error));
    else waiter.resolve();
    if (this.waiting.size === 0) this.idle = setTimeout(() => this.close(), this.opts.idleMs ?? FILL_WORKER_IDLE_MS).unref();
  }

  /** Ends idle workers: each closes its connection first, and is terminated if that takes too long. */
  private close(): void {
    if (this.waiting.size > 0) return;
    for (const slot of this.threads) {
      const worker = slot.worker;
      if (!worker) continue;
      slot.worker = undefined;
      worker.postMessage({ op: "close" } satisfies ToFillWorker);
      const kill = setTimeout(() => void worker.terminate(), CLOSE_GRACE_MS).unref();
      worker.once("exit", () => clearTimeout(kill));
    }
  }

  private fail(which: (w: { thread: number }) => boolean, err: Error): void {
    for (const [id, w] of this.waiting) {
      if (!which(w)) continue;
      this.waiting.delete(id);
      this.heldBy(w.thread, -1);
      w.reject(err);
    }
  }
}
