/**
 * The shape of one TERM message and the writer's reads of its own subject:
 * queued output, chunks, the headers a chunk carries, the last-message read
 * the placement fence is resolved against, and the publish retry backoff.
 */
import { headers as natsHeaders } from "@nats-io/transport-node";
import type { JetStreamManager, StoredMsg } from "@nats-io/jetstream";
import { formatTerminalSize, Headers, Streams, type TerminalSize } from "@paddock/contracts";
import { isNoMessage } from "@paddock/bus";
import type { OutputStream } from "../sandbox/process-group.ts";

const MSG_ID_HEADER = "Nats-Msg-Id";

export interface Pending {
  bytes: Uint8Array;
  stream: OutputStream | undefined;
  /** A resize marker (bytes empty): the terminal's size from here on. */
  size?: TerminalSize;
}

export interface Chunk {
  body: Uint8Array;
  stream?: OutputStream;
  /** Set on a resize marker (an empty message with `Paddock-Terminal-Size`). */
  size?: TerminalSize;
  /** Set on the final message of an app: its exit code as decimal, "" when killed by a signal. */
  exitCode?: string;
}

export interface LastMessage {
  seq: number;
  generation: number;
  msgId: string | undefined;
}

/**
 * Takes up to max bytes of one stream from the head of a pending queue
 * (mutating it), stopping at a stream change or a resize marker.
 */
export function takeQueuedBytes(pending: Pending[], stream: OutputStream | undefined, max: number): Uint8Array {
  let size = 0;
  for (const p of pending) {
    if (p.stream !== stream || p.size || size >= max) break;
    size += p.bytes.byteLength;
  }
  size = Math.min(size, max);
  const out = new Uint8Array(size);
  let filled = 0;
  while (filled < size) {
    const head = pending[0] as Pending;
    const take = Math.min(head.bytes.byteLength, size - filled);
    out.set(head.bytes.subarray(0, take), filled);
    filled += take;
    if (take === head.bytes.byteLength) pending.shift();
    else pending[0] = { bytes: head.bytes.subarray(take), stream: head.stream };
  }
  return out;
}

/**
 * The last message on a runner's own subject (seq 0 when it has none).
 * A direct get, the only read a runner's permissions scope to its own
 * subjects; a lagging replica at worst sends a refusal to the record.
 */
export async function readLastMessage(jsm: JetStreamManager, subject: string): Promise<LastMessage> {
  let msg: StoredMsg | null;
  try {
    msg = await jsm.direct.getMessage(Streams.term, { last_by_subj: subject });
  } catch (err) {
    if (isNoMessage(err)) return { seq: 0, generation: 0, msgId: undefined };
    throw err;
  }
  if (!msg) return { seq: 0, generation: 0, msgId: undefined };
  const gen = Number(msg.header?.get(Headers.placementGeneration) ?? "0");
  return { seq: msg.seq, generation: Number.isFinite(gen) ? gen : 0, msgId: msg.header?.get(MSG_ID_HEADER) || undefined };
}

/** The headers a chunk is published with under the given placement generation. */
export function chunkHeaders(chunk: Chunk, placementGeneration: number) {
  const h = natsHeaders();
  h.set(Headers.placementGeneration, String(placementGeneration));
  if (chunk.exitCode !== undefined) h.set(Headers.exitCode, chunk.exitCode);
  if (chunk.size) h.set(Headers.terminalSize, formatTerminalSize(chunk.size));
  // A pipe-run app (`tty: false`) says which pipe the bytes came from; PTY output has no such header.
  if (chunk.stream) h.set(Headers.stream, chunk.stream);
  return h;
}

/** The delay before retry number attempt: first, doubling, capped at max. */
export function retryBackoff(attempt: number, first: number, max: number): number {
  return Math.min(first * 2 ** Math.min(attempt, 10), max);
}

export function sameSize(a: TerminalSize, b: TerminalSize): boolean {
  return a.cols === b.cols && a.rows === b.rows;
}
