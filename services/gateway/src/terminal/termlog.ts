import type { JetStreamManager, StoredMsg } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/transport-node";
import { isDirectGetEmpty } from "@paddock/bus";
import { Headers, parseScreenSubject, parseTermSubject, parseTerminalSize, type Session, type TerminalSize } from "@paddock/contracts";

const BATCH = 256;

/** Sequence of the last message on a subject, 0 when it holds none. */
export async function lastSeqOf(jsm: JetStreamManager, stream: string, subject: string): Promise<number> {
  const m = await jsm.direct.getMessage(stream, { last_by_subj: subject });
  return m?.seq ?? 0;
}

/** Sequence of the first retained message on a subject, undefined when it holds none. */
export async function firstSeqOf(jsm: JetStreamManager, stream: string, subject: string): Promise<number | undefined> {
  const m = await jsm.direct.getMessage(stream, { seq: 1, next_by_subj: subject });
  return m?.seq;
}

/**
 * Reads the messages of one subject (wildcards allowed) with sequence in
 * [fromSeq, toSeq], in order, in batches; the caller may stop early.
 */
export async function* readRange(
  jsm: JetStreamManager,
  stream: string,
  subject: string,
  fromSeq: number,
  toSeq = Number.MAX_SAFE_INTEGER,
): AsyncGenerator<StoredMsg> {
  let next = Math.max(1, fromSeq);
  while (next <= toSeq) {
    const batch = await jsm.direct.getBatch(stream, { seq: next, batch: BATCH, next_by_subj: subject });
    let count = 0;
    try {
      for await (const m of batch) {
        count += 1;
        if (m.seq > toSeq) return;
        next = m.seq + 1;
        yield m;
      }
    } catch (err) {
      // Nothing (more) at or after `next`: the direct get answers 404 instead of an empty batch.
      if (count === 0 && isDirectGetEmpty(err)) return;
      throw err;
    }
    if (count < BATCH) return;
  }
}

/** The placement generation a TERM chunk was written under; 0 when absent or malformed. */
export function placementGenerationOf(h: MsgHdrs | undefined): number {
  const raw = h?.get(Headers.placementGeneration) ?? "";
  return /^\d{1,15}$/.test(raw) ? Number(raw) : 0;
}

/**
 * The exit of an app, carried by its last TERM message: undefined for a data
 * chunk, null for an exit by signal, else the code.
 */
export function exitCodeOf(h: MsgHdrs | undefined): number | null | undefined {
  if (!h?.has(Headers.exitCode)) return undefined;
  const raw = h.get(Headers.exitCode);
  return /^-?\d{1,10}$/.test(raw) ? Number(raw) : null;
}

/**
 * A resize marker of the app's terminal (an empty TERM message with
 * `Paddock-Terminal-Size`): undefined for output, null when the size is
 * malformed (a marker all the same: never output), else the size.
 */
export function terminalSizeOf(h: MsgHdrs | undefined): TerminalSize | null | undefined {
  if (!h?.has(Headers.terminalSize)) return undefined;
  return parseTerminalSize(h.get(Headers.terminalSize)) ?? null;
}

/** Where the record places a session: whose terminal chunks are its log right now. */
export type Placement = Pick<Session, "placementGeneration" | "poolId" | "runnerId">;

export const ChunkVerdict = {
  /** Written by the runner the record places this generation on: part of the log. */
  live: "live",
  /** From an older placement generation: superseded output. */
  stale: "stale",
  /** This generation, but under another runner's subject: forged, never shown. */
  foreign: "foreign",
  /** A newer generation than the placement the reader knows: re-read the record, then judge again. */
  ahead: "ahead",
} as const;
export type ChunkVerdict = (typeof ChunkVerdict)[keyof typeof ChunkVerdict];

/**
 * Judges one TERM chunk against the session's placement. A runner may publish
 * only under its own subject tokens (NATS permissions), but it chooses the
 * generation header, so only a chunk whose subject names the placed runner
 * and whose generation is the placement's counts.
 */
export function judgeChunk(subject: string, h: MsgHdrs | undefined, placement: Placement): ChunkVerdict {
  return judgeWriter(parseTermSubject(subject), h, placement);
}

/**
 * Judges a screen checkpoint like a chunk: only the placed runner's, of the
 * placement's generation, stands for the log a reader would show (`live`).
 */
export function judgeCheckpoint(subject: string, h: MsgHdrs | undefined, placement: Placement): ChunkVerdict {
  return judgeWriter(parseScreenSubject(subject), h, placement);
}

function judgeWriter(from: { poolId: string; runnerId: string } | undefined, h: MsgHdrs | undefined, placement: Placement): ChunkVerdict {
  const generation = placementGenerationOf(h);
  if (generation < placement.placementGeneration) return ChunkVerdict.stale;
  if (generation > placement.placementGeneration) return ChunkVerdict.ahead;
  return from !== undefined && from.poolId === placement.poolId && from.runnerId === placement.runnerId ? ChunkVerdict.live : ChunkVerdict.foreign;
}
