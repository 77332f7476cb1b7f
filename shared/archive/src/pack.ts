import { closeSync, lstatSync, read, readlinkSync, readSync, type Stats } from "node:fs";
import { readdir } from "node:fs/promises";
import { promisify } from "node:util";
import { Header, Pax, type HeaderData } from "tar";
import { DirFd, errnoOf, MAX_DIR_DEPTH, type FileOwner } from "./dir-fd.ts";
import { UnsafePathError } from "./errors.ts";

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
export interface PackHooks {
  beforeEntry?: (rel: string) => void;
}

interface Walk {
  /** dev:ino → archive path of a file already packed, so another link to it is a hard link entry. */
  links: Map<string, string>;
  hooks: PackHooks | undefined;
  /** Set for a sandboxed session's workspace: only files this user owns are packed. */
  owner: FileOwner | undefined;
}

/** node-tar's portable mode: owner can always read and write, no group/other write, listable directories. */
export function portableMode(mode: number, isDir: boolean): number {
  let m = ((mode & 0o7777) | 0o600) & ~0o22;
  if (isDir) {
    if (m & 0o400) m |= 0o100;
    if (m & 0o40) m |= 0o10;
    if (m & 0o4) m |= 0o1;
  }
  return m;
}

/** The header block(s) of one entry (a pax record first when the path or link does not fit). */
export function header(data: HeaderData): Buffer {
  const h = new Header(data);
  const needPax = h.encode();
  const block = h.block as Buffer;
  if (!needPax) return block;
  return Buffer.concat([new Pax({ path: data.path, linkpath: data.linkpath, mtime: data.mtime }).encode(), block]);
}

/**
 * Every packable entry of directory `dir` (itself first as `rel`, then its
 * children depth first, by name). Each child is opened through its parent's
 * descriptor without following a link, and what it is comes from fstat of
 * that descriptor: a name swapped for a symlink by the sandbox is packed as a
 * link (never followed), a FIFO is opened without blocking and left out.
 */
async function* walkDir(dir: DirFd, rel: string, depth: number, walk: Walk): AsyncGenerator<Buffer> {
  const st = dir.stat();
  yield header({ path: rel.endsWith("/") ? rel : `${rel}/`, type: "Directory", mode: portableMode(st.mode, true), size: 0 });
  if (depth >= MAX_DIR_DEPTH) throw new UnsafePathError(`directory tree deeper than ${MAX_DIR_DEPTH} levels`);
  let names: string[];
  try {
    names = (await readdir(dir.self())).sort();
  } catch (err) {
    if (errnoOf(err) === "ENOENT") return;
    throw err;
  }
  // node-tar's naming: the children of "." are "./name".
  const base = rel.endsWith("/") ? rel : `${rel}/`;
  for (const name of names) yield* walkEntry(dir, name, base + name, depth + 1, walk);
}

async function* walkEntry(parent: DirFd, name: string, rel: string, depth: number, walk: Walk): AsyncGenerator<Buffer> {
  walk.hooks?.beforeEntry?.(rel);
  const opened = parent.openEntry(name);
  if (opened === undefined) return;
  if (opened === "symlink") {
    const link = symlinkOf(parent, name);
    if (link) yield header({ path: rel, type: "SymbolicLink", linkpath: link.target, mode: portableMode(link.stat.mode, false), size: 0, mtime: link.stat.mtime });
    return;
  }
  const { fd, stat } = opened;
  if (stat.isDirectory()) {
    const dir = parent.adopt(fd, name);
    try {
      yield* walkDir(dir, rel, depth, walk);
    } finally {
      dir.close();
    }
    return;
  }
  try {
    // FIFOs, sockets and devices are left out.
    if (!stat.isFile()) return;
    // A file of another user in a session's workspace is no file the session wrote (the runner gives it
    // what it writes there): a hard link it planted to one it may not read. Left out, never read.
    if (walk.owner && stat.uid !== walk.owner.uid) return;
    if (stat.nlink > 1) {
      const key = `${stat.dev}:${stat.ino}`;
      const first = walk.links.get(key);
      if (first !== undefined) {
        yield header({ path: rel, type: "Link", linkpath: first, mode: portableMode(stat.mode, false), size: 0, mtime: stat.mtime });
        return;
      }
      walk.links.set(key, rel);
    }
    yield header({ path: rel, type: "File", mode: portableMode(stat.mode, false), size: stat.size, mtime: stat.mtime });
    yield* fileBody(fd, stat);
  } finally {
    closeSync(fd);
  }
}

/** A symlink's target and lstat, read without following it; undefined when it went away or is no longer a link. */
export function symlinkOf(parent: DirFd, name: string): { target: string; stat: Stats } | undefined {
  try {
    const stat = lstatSync(parent.at(name));
    if (!stat.isSymbolicLink()) return undefined;
    return { target: readlinkSync(parent.at(name)), stat };
  } catch (err) {
    const code = errnoOf(err);
    if (code === "ENOENT" || code === "EINVAL") return undefined;
    throw err;
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
  const walk: Walk = { links: new Map(), hooks, owner };
  try {
    for (const top of entries) {
      if (top === ".") yield* walkDir(root, ".", 0, walk);
      else yield* walkEntry(root, top, top, 1, walk);
    }
    yield TAR_END;
  } finally {
    if (root !== cwd) root.close();
  }
}
