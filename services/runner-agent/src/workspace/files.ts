/**
 * One file's bytes and a directory's listing, for the files routes (issue 24
 * item 3), with the rules of push and pull (decision 0043): every path is
 * held by descriptor from the workspace down (`resolveInside`, O_NOFOLLOW at
 * each component), so nothing the session swaps in redirects the runner; a
 * regular file another user owns is not the session's (a hard link it made to
 * someone else's file) and is neither read nor listed.
 */
import { closeSync, createReadStream, lstatSync, readdirSync, rmdirSync, unlinkSync, type Stats } from "node:fs";
import { Readable } from "node:stream";
import { resolveInside, UnsafePathError, writeFresh, type DirFd, type FileOwner, type ReplaceFile } from "@paddock/archive";
import { ConflictError, MAX_LIST_ENTRIES, type ByteRange, type FileEntry, type FileList } from "@paddock/contracts";

/** Which bytes of a file of size a range asks for (inclusive; undefined when it starts past the end). */
export function rangeOf(size: number, range: ByteRange | undefined): { start: number; end: number } | undefined {
  if (range === undefined) return { start: 0, end: size - 1 };
  if ("suffix" in range) return { start: Math.max(0, size - range.suffix), end: size - 1 };
  if (range.first >= size) return undefined;
  return { start: range.first, end: Math.min(range.last ?? size - 1, size - 1) };
}

/**
 * An open regular file under the workspace: its size, and a stream of exactly
 * the bytes the range asks for (all of it without one) as the file was when
 * opened; `part` undefined (and nothing read) when the range starts past its end.
 */
/** The largest piece a file read asks the kernel for at once. */
const READ_PIECE_MAX_BYTES = 1024 * 1024;

export async function openFileInside(
  workspace: string,
  segments: readonly string[],
  owner: FileOwner | undefined,
  range?: ByteRange,
): Promise<{ stream: Readable; size: number; part: { start: number; end: number } | undefined }> {
  const target = await resolveInside(workspace, segments, { create: false });
  try {
    if (target.kind === "directory" || target.name === undefined) throw new UnsafePathError("path is a directory");
    const entry = target.dir.openEntry(target.name);
    if (entry === undefined) throw new UnsafePathError("path not found", true);
    if (entry === "symlink") throw new UnsafePathError("path is a symbolic link");
    const { fd, stat } = entry;
    if (!stat.isFile() || (owner !== undefined && stat.uid !== owner.uid)) {
      closeSync(fd);
      if (stat.isDirectory()) throw new UnsafePathError("path is a directory");
      throw stat.isFile() ? new UnsafePathError("path not found", true) : new UnsafePathError("path is not a regular file");
    }
    const part = rangeOf(stat.size, range);
    if (part === undefined || part.end < part.start) {
      closeSync(fd);
      return { stream: Readable.from([]), size: stat.size, part };
    }
    // Exactly the bytes stat saw: a file that grows meanwhile is answered as it was (the client was told this length).
    // Read in pieces of up to 1 MiB (one read for most files a call moves inline), not the default 64 KiB.
    const highWaterMark = Math.min(READ_PIECE_MAX_BYTES, Math.max(1, part.end - part.start + 1));
    return { stream: createReadStream("", { fd, start: part.start, end: part.end, autoClose: true, highWaterMark }), size: stat.size, part };
  } finally {
    target.close();
  }
}

/**
 * The entries below a workspace directory, depth levels deep, in name order
 * (depth first), at most MAX_LIST_ENTRIES (then truncated). Symlinks are
 * listed, never followed; FIFOs, sockets and devices are left out.
 */
export async function listInside(workspace: string, segments: readonly string[], depth: number, owner: FileOwner | undefined): Promise<FileList> {
  const target = await resolveInside(workspace, segments, { create: false });
  try {
    if (target.kind !== "directory") throw new UnsafePathError("path is not a directory");
    const out: FileList = { entries: [], truncated: false };
    walk(target.dir, segments.join("/"), 1, { depth, owner, out });
    return out;
  } finally {
    target.close();
  }
}

interface Walk {
  depth: number;
  owner: FileOwner | undefined;
  out: FileList;
}

function walk(dir: DirFd, prefix: string, level: number, w: Walk): void {
  const names = readdirSync(dir.self()).sort();
  for (let from = 0; from < names.length; ) {
    if (w.out.entries.length >= MAX_LIST_ENTRIES) {
      w.out.truncated = true;
      return;
    }
    // Stat no more than could still be listed: a huge directory is not stat'ed whole for a truncated answer.
    const batch = names.slice(from, from + MAX_LIST_ENTRIES - w.out.entries.length);
    from += batch.length;
    const stats = statsIn(dir, batch);
    for (const [i, name] of batch.entries()) {
      const stat = stats[i];
      const type = stat ? typeOf(stat) : undefined;
      if (!stat || !type || (type === "file" && w.owner !== undefined && stat.uid !== w.owner.uid)) continue;
      const path = prefix === "" ? name : `${prefix}/${name}`;
      w.out.entries.push(entryOf(path, type, stat));
      if (type === "dir" && level < w.depth) walkChild(dir, name, path, level + 1, w);
      if (w.out.entries.length >= MAX_LIST_ENTRIES && (i < batch.length - 1 || from < names.length)) {
        w.out.truncated = true;
        return;
      }
    }
  }
}

/**
 * lstat of each name in dir (undefined for one gone meanwhile). Relative to
 * the directory itself, held by its descriptor: the process's working
 * directory is set to it (through /proc/self/fd, so to that inode whatever
 * happened to its path) for this synchronous loop only, and set back before
 * anything else runs. A bare name resolves one component, never through a
 * link, as fstatat(fd, name, AT_SYMLINK_NOFOLLOW) would; and it costs a third
 * less than the same lstat through /proc/self/fd/N/name (10,000 entries here:
 * 36 against 55 ms). The runner names every other path absolutely.
 */
function statsIn(dir: DirFd, names: readonly string[]): Array<Stats | undefined> {
  const back = process.cwd();
  process.chdir(dir.self());
  try {
    return names.map((name) => lstatSync(name, { throwIfNoEntry: false }));
  } finally {
    process.chdir(back);
  }
}

function walkChild(dir: DirFd, name: string, path: string, level: number, w: Walk): void {
  let child: DirFd;
  try {
    child = dir.child(name);
  } catch {
    return; // swapped for a link or removed since it was listed: not followed
  }
  try {
    walk(child, path, level, w);
  } finally {
    child.close();
  }
}

export function lstatOrGone(path: string): Stats | undefined {
  try {
    return lstatSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

function typeOf(stat: Stats): FileEntry["type"] | undefined {
  if (stat.isFile()) return "file";
  if (stat.isDirectory()) return "dir";
  if (stat.isSymbolicLink()) return "symlink";
  return undefined;
}

function entryOf(path: string, type: FileEntry["type"], stat: Stats): FileEntry {
  return { path, type, size: stat.size, mode: stat.mode & 0o7777, mtime: Math.floor(stat.mtimeMs) };
}

/**
 * Writes one file whole at segments (its parents made, given to owner), as a
 * new inode renamed over what was there: a file or a link is replaced, never
 * written through; a directory there is refused. Answers its size.
 */
export async function writeFileInside(workspace: string, segments: readonly string[], source: AsyncIterable<Uint8Array>, opts: { mode: number; owner: FileOwner | undefined; maxBytes: number; replace?: ReplaceFile | undefined }): Promise<number> {
  const name = segments.at(-1);
  if (name === undefined) throw new UnsafePathError("path is the workspace itself");
  const parent = await resolveInside(workspace, segments.slice(0, -1), { create: true, owner: opts.owner });
  try {
    if (parent.kind !== "directory") throw new UnsafePathError("path is not a directory");
    if (lstatOrGone(parent.dir.at(name))?.isDirectory()) throw new UnsafePathError("path is a directory");
    return await writeFresh(parent.dir, name, source, opts);
  } finally {
    parent.close();
  }
}

/** How deep a recursive delete goes (deeper is refused, nothing of it removed past the bound). */
const MAX_DELETE_DEPTH = 256;

/**
 * Removes what is at segments: a file or link (never followed), an empty
 * directory, or with recursive a directory and everything in it, each
 * directory entered by descriptor (O_NOFOLLOW): a directory swapped for a
 * link meanwhile is not entered, and its removal then fails.
 */
export async function deleteInside(workspace: string, segments: readonly string[], recursive: boolean): Promise<void> {
  const name = segments.at(-1);
  if (name === undefined) throw new UnsafePathError("path is the workspace itself");
  const parent = await resolveInside(workspace, segments.slice(0, -1), { create: false });
  try {
    if (parent.kind !== "directory") throw new UnsafePathError("path not found", true);
    const stat = lstatOrGone(parent.dir.at(name));
    if (!stat) throw new UnsafePathError("path not found", true);
    if (!stat.isDirectory()) return unlinkSync(parent.dir.at(name));
    if (recursive) removeTree(parent.dir, name, 1);
    else removeEmptyDir(parent.dir, name);
  } finally {
    parent.close();
  }
}

function removeEmptyDir(dir: DirFd, name: string): void {
  try {
    rmdirSync(dir.at(name));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOTEMPTY") throw new ConflictError("directory is not empty (recursive=true removes it and everything in it)");
    throw err;
  }
}

function removeTree(dir: DirFd, name: string, level: number): void {
  if (level > MAX_DELETE_DEPTH) throw new UnsafePathError(`directory is nested deeper than ${MAX_DELETE_DEPTH} levels`);
  const child = dir.child(name);
  try {
    for (const entry of readdirSync(child.self())) {
      const stat = lstatOrGone(child.at(entry));
      if (stat?.isDirectory()) removeTree(child, entry, level + 1);
      else if (stat) unlinkSync(child.at(entry));
    }
  } finally {
    child.close();
  }
  rmdirSync(dir.at(name));
}
