import { createDecipheriv } from "node:crypto";
import type { JetStreamManager } from "@nats-io/jetstream";
import { CheckpointError } from "../errors.ts";

/**
 * Reading one sealed checkpoint chunk (docs/decisions/0062). Imports no
 * schema: the restore worker (fill-worker.ts) runs it on a heap of its own,
 * kept small because every collection the chunks' memory sets off marks it.
 */

/** A sealed chunk's layout: random IV in front, GCM tag at the end. */
export const IV_BYTES = 12;
export const TAG_BYTES = 16;

/** Where a chunk is and how to open it (chunk-store.ts addressOf makes one from a manifest's chunk). */
export interface ChunkAddress {
  stream: string;
  subject: string;
  /** Its own key, base64. */
  key: string;
  /** Its plain length. */
  bytes: number;
}

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

/** A chunk's plain bytes, by a direct get from whichever runner's stream holds it; fails when gone or when it does not open with its key. */
export async function fetchChunk(jsm: JetStreamManager, chunk: ChunkAddress): Promise<Buffer> {
  let data: Uint8Array | undefined;
  try {
    data = (await jsm.direct.getMessage(chunk.stream, { last_by_subj: chunk.subject }))?.data;
  } catch (err) {
    throw new CheckpointError("checkpoint chunk could not be read", { cause: err });
  }
  if (!data || data.length < IV_BYTES + TAG_BYTES) throw new CheckpointError("checkpoint chunk not found");
  try {
    const plain = openSealed(data, Buffer.from(chunk.key, "base64"));
    if (plain.length !== chunk.bytes) throw new Error("length differs");
    return plain;
  } catch (err) {
    throw new CheckpointError("checkpoint chunk does not open with its key", { cause: err });
  }
}
