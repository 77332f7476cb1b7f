import { writeSync } from "node:fs";
import type { ChunkAddress } from "./chunk-fetch.ts";

/** Writes a restored file's bytes from its chunks, by the descriptor the extraction opened. */
export interface FileFiller {
  /** Every chunk's plain bytes at its offset in fd (the chunks in file order); fd stays the caller's. */
  fill(fd: number, chunks: readonly ChunkAddress[]): Promise<void>;
}

/** Chunks fetched ahead of the ones being written, across every file being filled. */
export const GETS_AHEAD = 6;

interface Job {
  remaining: number;
  failed: boolean;
  resolve: () => void;
  reject: (err: unknown) => void;
}

interface Piece {
  job: Job;
  fd: number;
  chunk: ChunkAddress;
  at: number;
}

/**
 * Fills files with fetched chunks: one queue of every file's chunks in the
 * order files were asked for, GETS_AHEAD of them fetched at once, each
 * written at its offset as it arrives (pwrite: order does not matter). The
 * write is synchronous on purpose: once a job has failed, or the thread
 * running this has ended, no write to its descriptor can still be in flight,
 * so the caller may close it (its number may name another file next).
 * Runs inside the restore worker (fill-worker.ts), or in-thread where there
 * is none (tests, tools).
 */
export class ChunkFiller implements FileFiller {
  private readonly queue: Piece[] = [];
  private inFlight = 0;

  constructor(
    private readonly fetch: (chunk: ChunkAddress) => Promise<Buffer>,
    private readonly ahead = GETS_AHEAD,
  ) {}

  fill(fd: number, chunks: readonly ChunkAddress[]): Promise<void> {
    if (chunks.length === 0) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const job: Job = { remaining: chunks.length, failed: false, resolve, reject };
      let at = 0;
      for (const chunk of chunks) {
        this.queue.push({ job, fd, chunk, at });
        at += chunk.bytes;
      }
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < this.ahead) {
      const piece = this.queue.shift();
      if (!piece) return;
      if (piece.job.failed) continue;
      this.inFlight += 1;
      this.fetch(piece.chunk).then(
        (plain) => this.settle(piece, { plain }),
        (err: unknown) => this.settle(piece, { err }),
      );
    }
  }

  private settle(piece: Piece, result: { plain: Buffer } | { err: unknown }): void {
    this.inFlight -= 1;
    const { job } = piece;
    if (!job.failed) {
      try {
        if ("err" in result) throw result.err;
        const { plain } = result;
        for (let done = 0; done < plain.length; ) done += writeSync(piece.fd, plain, done, plain.length - done, piece.at + done);
        job.remaining -= 1;
        if (job.remaining === 0) job.resolve();
      } catch (err) {
        job.failed = true;
        job.reject(err);
      }
    }
    this.pump();
  }
}
