// The chunk files of a backup (docs/operations.md, Backup and restore): each
// runner's chunk stream (docs/decisions/0062) as one file of records
// `u16be subjectLength, subject, u32be dataLength, data`, one per chunk. The
// messages carry no headers that matter, so subject and bytes are all of it.
// Without them a restored manifest checkpoint names chunks nobody holds.
import { open } from "node:fs/promises";
import { chunkStreamOwner, MANIFEST_CHUNK_BYTES, Subjects } from "@paddock/contracts";
import { BackupCorruptError } from "./backup-format.ts";

export interface ChunkRecord {
  subject: string;
  data: Uint8Array;
}

/** A chunk's sealed bytes are its plain bytes (at most MANIFEST_CHUNK_BYTES) plus IV and tag; the stream refuses more than this, so a record claiming more is not one. */
const MAX_RECORD_DATA = 2 * MANIFEST_CHUNK_BYTES;
/** A chunk's id: the sha256 of its sealed bytes, base64url, one subject token. */
const CHUNK_ID = /^[A-Za-z0-9_-]{43}$/;

/** One record as the bytes to write (header, then the data as is). */
export function encodeChunkRecord(subject: string, data: Uint8Array): Uint8Array[] {
  const name = Buffer.from(subject, "utf8");
  if (name.length > 0xffff) throw new RangeError(`chunk subject of ${String(name.length)} bytes`);
  const head = Buffer.alloc(2 + name.length + 4);
  head.writeUInt16BE(name.length, 0);
  name.copy(head, 2);
  head.writeUInt32BE(data.length, 2 + name.length);
  return [head, data];
}

/** The records of a chunk file in order, read piece by piece (a file may hold gigabytes); a truncated or oversized record is BackupCorruptError. */
export async function* readChunkRecords(path: string): AsyncGenerator<ChunkRecord> {
  const fh = await open(path, "r");
  try {
    let pos = 0;
    /** n bytes from pos on; undefined only when endOk and the file ends right at pos. */
    const exactly = async (n: number, endOk = false): Promise<Buffer | undefined> => {
      const buf = Buffer.alloc(n);
      let got = 0;
      while (got < n) {
        const { bytesRead } = await fh.read(buf, got, n - got, pos + got);
        if (bytesRead === 0) break;
        got += bytesRead;
      }
      if (endOk && got === 0) return undefined;
      if (got < n) throw new BackupCorruptError(`${path}: truncated record at byte ${String(pos)}`);
      pos += n;
      return buf;
    };
    const need = async (n: number): Promise<Buffer> => (await exactly(n)) ?? Buffer.alloc(0);
    for (;;) {
      const len = await exactly(2, true);
      if (len === undefined) return; // the end, between records
      const subject = (await need(len.readUInt16BE(0))).toString("utf8");
      const dataLen = (await need(4)).readUInt32BE(0);
      if (dataLen > MAX_RECORD_DATA) throw new BackupCorruptError(`${path}: a record of ${String(dataLen)} bytes is larger than any chunk`);
      yield { subject, data: await need(dataLen) };
    }
  } finally {
    await fh.close();
  }
}

/**
 * The pool and runner of a backed-up chunk stream, after checking that every
 * record of its file is a chunk of that stream's own (`paddock.chunks.<pool>.<runner>.<id>`,
 * each subject once) and that there are as many as the manifest says: a
 * record publishing elsewhere would write outside the stream being restored.
 * Throws BackupCorruptError.
 */
export async function checkChunkFile(path: string, stream: string, chunks: number): Promise<{ poolId: string; runnerId: string }> {
  const owner = chunkStreamOwner(stream);
  if (owner === undefined) throw new BackupCorruptError(`chunk stream ${stream} names no runner`);
  const prefix = Subjects.chunk(owner.poolId, owner.runnerId, "");
  const seen = new Set<string>();
  for await (const r of readChunkRecords(path)) {
    if (!r.subject.startsWith(prefix) || !CHUNK_ID.test(r.subject.slice(prefix.length))) throw new BackupCorruptError(`${path}: subject ${JSON.stringify(r.subject.slice(0, 200))} is not a chunk of ${stream}`);
    if (seen.has(r.subject)) throw new BackupCorruptError(`${path}: subject ${r.subject} twice`);
    seen.add(r.subject);
  }
  if (seen.size !== chunks) throw new BackupCorruptError(`${path}: ${String(seen.size)} chunks, the manifest says ${String(chunks)}`);
  return owner;
}
