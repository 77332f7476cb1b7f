/**
 * New inodes in a held directory (dir-fd.ts): a file is always created
 * (O_CREAT|O_EXCL|O_NOFOLLOW), never opened where something already is, so
 * no existing link, hard link or FIFO is written through. The unpacker and
 * the single-file writer share these.
 */
import { closeSync, constants as fsc, fchmodSync, fchownSync, openSync, renameSync, unlinkSync, writeSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { errnoOf, type DirFd, type FileOwner } from "./dir-fd.ts";

const { O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_NOCTTY } = fsc;
export const CREATE_FLAGS = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY;

/** Removes a temporary name this process made; it may be gone already (the sandbox can remove it). */
export function unlinkQuietly(dir: DirFd, name: string): void {
  try {
    unlinkSync(dir.at(name));
  } catch {
    // Nothing to undo.
  }
}

/** A new file at name, or undefined when something is already there. */
export function openFresh(dir: DirFd, name: string, mode: number): number | undefined {
  try {
    return openSync(dir.at(name), CREATE_FLAGS, mode);
  } catch (err) {
    if (errnoOf(err) === "EEXIST") return undefined;
    throw err;
  }
}

/** Thrown when a written file would pass its bound; nothing of it is left. */
export class FileTooLargeError extends Error {
  constructor(readonly maxBytes: number) {
    super(`file exceeds ${maxBytes} bytes`);
    this.name = "FileTooLargeError";
  }
}

/** Puts the complete file named tmp in dir at name: a file or a link there is replaced (never followed), a directory refused. */
export type ReplaceFile = (dir: DirFd, tmp: string, name: string) => void;

/**
 * Writes source into a new inode named name in dir: given to owner (by
 * descriptor) before a byte is written, chmod'ed to mode after, and put in
 * place of what was at name (a file or a link, never followed) once
 * complete: renamed over it, or as opts.replace does (which must refuse a
 * directory at name, as the rename does). A failure, or more than maxBytes,
 * leaves nothing behind. Answers the bytes written.
 */
export async function writeFresh(dir: DirFd, name: string, source: AsyncIterable<Uint8Array>, opts: { mode: number; owner?: FileOwner | undefined; maxBytes: number; replace?: ReplaceFile | undefined }): Promise<number> {
  const mode = opts.mode & 0o7777;
  const tmp = `.paddock-tmp-${randomBytes(6).toString("hex")}`;
  const fd = openSync(dir.at(tmp), CREATE_FLAGS, 0o600);
  let size = 0;
  try {
    if (opts.owner) fchownSync(fd, opts.owner.uid, opts.owner.gid);
    for await (const chunk of source) {
      size += chunk.byteLength;
      if (size > opts.maxBytes) throw new FileTooLargeError(opts.maxBytes);
      for (let at = 0; at < chunk.byteLength; ) at += writeSync(fd, chunk, at, chunk.byteLength - at);
    }
    fchmodSync(fd, mode);
    if (opts.replace) opts.replace(dir, tmp, name);
    else renameSync(dir.at(tmp), dir.at(name));
  } catch (err) {
    unlinkQuietly(dir, tmp);
    throw err;
  } finally {
    closeSync(fd);
  }
  return size;
}
