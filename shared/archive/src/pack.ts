import { read, readSync, type Stats } from "node:fs";
import { promisify } from "node:util";
import { DirFd, errnoOf, type FileOwner } from "./dir-fd.ts";
import { newScan, scanChildren, scanEntry, type ScanHooks, type ScannedEntry } from "./scan.ts";
import { header, portableMode } from "./tar-header.ts";

/**
 * Files up to this size are read with synchronous calls: a thread-pool round
 * trip per read costs more than the read itself for a workspace of many small
 * files, and a file this small holds the event loop for well under a
 * millisecond. Larger files stream with asynchronous reads.
 */
export const SYNC_PACK_MAX_BYTES = 1024 * 1024;

/** The end of a tar archive: two zero blocks. */
const TAR_END = Buffer.alloc(1024);

const readAsync = promisify(read);

/** Observes the walk; the race tests act between a directory being held and an entry in it being opened. */
export type PackHooks = ScanHooks;

/** The tar of scanned entries: a header each, and a file's bytes after its header. */
async function* tarOf(entries: AsyncIterable<ScannedEntry>): AsyncGenerator<Buffer> {
  for await (const e of entries) {
    switch (e.type) {
      case "dir":
        yield header({ path: `${e.path}/`, type: "Directory", mode: e.mode, size: 0 });
        break;
      case "symlink":
        yield header({ path: e.path, type: "SymbolicLink", linkpath: e.target, mode: e.mode, size: 0, mtime: new Date(e.mtimeMs) });
        break;
      case "link":
        yield header({ path: e.path, type: "Link", linkpath: e.target, mode: e.mode, size: 0, mtime: new Date(e.mtimeMs) });
        break;
      case "file":
        yield header({ path: e.path, type: "File", mode: e.mode, size: e.stat.size, mtime: e.stat.mtime });
        yield* fileBody(e.fd, e.stat);
        break;
    }
  }
}

/**
 * The file's bytes from its descriptor, padded to whole blocks. Exactly
 * stat.size bytes: a file that grew while read is cut there, one that shrank
 * is filled with zeros (the header already gave the size).
 */
async function* fileBody(fd: number, stat: Stats): AsyncGenerator<Buffer> {
  const blockLen = 512 * Math.ceil(stat.size / 512);
  if (stat.size <= SYNC_PACK_MAX_BYTES) {
    const buf = Buffer.alloc(blockLen);
    for (let pos = 0; pos < stat.size; ) {
      const n = readSync(fd, buf, pos, stat.size - pos, pos);
      if (n === 0) break;
      pos += n;
    }
    if (blockLen > 0) yield buf;
    return;
  }
  for (let pos = 0; pos < blockLen; ) {
    const len = Math.min(SYNC_PACK_MAX_BYTES, blockLen - pos);
    const buf = Buffer.alloc(len);
    const want = Math.max(0, Math.min(len, stat.size - pos));
    for (let got = 0; got < want; ) {
      const { bytesRead } = await readAsync(fd, buf, got, want - got, pos + got);
      if (bytesRead === 0) break;
      got += bytesRead;
    }
    pos += len;
    yield buf;
  }
}

/**
 * A plain tar of `entries` under cwd: "." (the directory itself and
 * everything under it) or single names in it. A path cwd is opened (following
 * a link unless followRoot is false); a DirFd is the caller's, left open. uid/gid and
 * other host specifics are left out (portable), symlinks are stored as links,
 * and any tar reads the result. With owner, files of any other user are left out. Produced as the consumer pulls it.
 */
export async function* tarChunks(
  cwd: string | DirFd,
  entries: readonly string[],
  hooks?: PackHooks,
  followRoot = true,
  owner?: FileOwner,
): AsyncGenerator<Buffer> {
  let root: DirFd;
  try {
    root = typeof cwd === "string" ? DirFd.open(cwd, { follow: followRoot }) : cwd;
  } catch (err) {
    // Gone before it was walked: an empty archive, as for anything gone meanwhile.
    if (errnoOf(err) !== "ENOENT") throw err;
    yield TAR_END;
    return;
  }
  const scan = newScan(owner, hooks);
  try {
    for (const top of entries) {
      // node-tar's naming: "." is "./", its children "./name".
      if (top === ".") {
        yield header({ path: "./", type: "Directory", mode: portableMode(root.stat().mode, true), size: 0 });
        yield* tarOf(scanChildren(root, "./", 0, scan));
      } else yield* tarOf(scanEntry(root, top, top, 1, scan));
    }
    yield TAR_END;
  } finally {
    if (root !== cwd) root.close();
  }
}
