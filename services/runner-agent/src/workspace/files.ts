/**
 * One file's bytes and a directory's listing, for the files routes (issue 24
 * item 3), with the rules of push and pull (decision 0043): every path is
 * held by descriptor from the workspace down (`resolveInside`, O_NOFOLLOW at
 * each component), so nothing the session swaps in redirects the runner; a
 * regular file another user owns is not the session's (a hard link it made to
 * someone else's file) and is neither read nor listed.
 */
import { closeSync, createReadStream, lstatSync, readdirSync, type Stats } from "node:fs";
import { Readable } from "node:stream";
import { resolveInside, UnsafePathError, type DirFd, type FileOwner } from "@paddock/archive";
import { MAX_LIST_ENTRIES, type FileEntry, type FileList } from "@paddock/contracts";

/** An open regular file under the workspace and its size, read as a stream of exactly that many bytes. */
export async function openFileInside(workspace: string, segments: readonly string[], owner: FileOwner | undefined): Promise<{ stream: Readable; size: number }> {
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
    if (stat.size === 0) {
      closeSync(fd);
      return { stream: Readable.from([]), size: 0 };
    }
    // Exactly the size stat saw: a file that grows meanwhile is answered as it was (the client was told this length).
    return { stream: createReadStream("", { fd, start: 0, end: stat.size - 1, autoClose: true }), size: stat.size };
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
  for (const name of readdirSync(dir.self()).sort()) {
    if (w.out.entries.length >= MAX_LIST_ENTRIES) {
      w.out.truncated = true;
      return;
    }
    const stat = lstatOrGone(dir.at(name));
    const type = stat ? typeOf(stat) : undefined;
    if (!stat || !type || (type === "file" && w.owner !== undefined && stat.uid !== w.owner.uid)) continue;
    const path = prefix === "" ? name : `${prefix}/${name}`;
    w.out.entries.push(entryOf(path, type, stat));
    if (type === "dir" && level < w.depth) walkChild(dir, name, path, level + 1, w);
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

function lstatOrGone(path: string): Stats | undefined {
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
