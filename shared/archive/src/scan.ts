import { closeSync, lstatSync, readlinkSync, type Stats } from "node:fs";
import { readdir } from "node:fs/promises";
import { errnoOf, MAX_DIR_DEPTH, type DirFd, type FileOwner } from "./dir-fd.ts";
import { UnsafePathError } from "./errors.ts";
import { portableMode } from "./tar-header.ts";

/**
 * One entry of a walked tree, by its path under the prefix the walk was given
 * ("a/b" from scanTree). A file comes with its open descriptor, valid until
 * the consumer asks for the next entry (the walk closes it then).
 */
export type ScannedEntry =
  | { type: "dir"; path: string; mode: number }
  | { type: "file"; path: string; mode: number; fd: number; stat: Stats }
  | { type: "symlink"; path: string; target: string; mode: number; mtimeMs: number }
  /** Another name of a file already yielded (its path in target). */
  | { type: "link"; path: string; target: string; mode: number; mtimeMs: number };

/** Observes the walk; the race tests act between a directory being held and an entry in it being opened. */
export interface ScanHooks {
  beforeEntry?: (path: string) => void;
}

/** One walk's state: every call of it shares the hard links seen. */
export interface Scan {
  /** Set for a sandboxed session's workspace: only files this user owns are walked. */
  owner: FileOwner | undefined;
  hooks: ScanHooks | undefined;
  /** dev:ino → path of a file already yielded. */
  links: Map<string, string>;
}

export function newScan(owner?: FileOwner, hooks?: ScanHooks): Scan {
  return { owner, hooks, links: new Map() };
}

/**
 * Every entry under root (not root itself), directories before what they
 * hold, children by name: each child opened through its parent's descriptor
 * without following a link (a name swapped for a symlink is a link, never
 * followed), FIFOs, sockets and devices left out (a FIFO opened without
 * blocking), and with owner only that user's files (a hard link the sandbox
 * planted to another user's file is never read). Modes are the portable ones
 * a tar gets. What packs a tar and what builds a checkpoint manifest.
 */
export async function* scanTree(root: DirFd, owner?: FileOwner): AsyncGenerator<ScannedEntry> {
  yield* scanChildren(root, "", 0, newScan(owner));
}

/** The entries under dir, named prefix + name; dir is at depth. */
export async function* scanChildren(dir: DirFd, prefix: string, depth: number, scan: Scan): AsyncGenerator<ScannedEntry> {
  if (depth >= MAX_DIR_DEPTH) throw new UnsafePathError(`directory tree deeper than ${MAX_DIR_DEPTH} levels`);
  let names: string[];
  try {
    names = (await readdir(dir.self())).sort();
  } catch (err) {
    if (errnoOf(err) === "ENOENT") return;
    throw err;
  }
  for (const name of names) yield* scanEntry(dir, name, prefix + name, depth + 1, scan);
}

/** Entry name of parent, as path (and everything under it when it is a directory). */
export async function* scanEntry(parent: DirFd, name: string, path: string, depth: number, scan: Scan): AsyncGenerator<ScannedEntry> {
  scan.hooks?.beforeEntry?.(path);
  const opened = parent.openEntry(name);
  if (opened === undefined) return;
  if (opened === "symlink") {
    const link = symlinkOf(parent, name);
    if (link) yield { type: "symlink", path, target: link.target, mode: portableMode(link.stat.mode, false), mtimeMs: link.stat.mtimeMs };
    return;
  }
  const { fd, stat } = opened;
  if (stat.isDirectory()) {
    const dir = parent.adopt(fd, name);
    try {
      yield { type: "dir", path, mode: portableMode(stat.mode, true) };
      yield* scanChildren(dir, `${path}/`, depth, scan);
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
    if (scan.owner && stat.uid !== scan.owner.uid) return;
    if (stat.nlink > 1) {
      const key = `${stat.dev}:${stat.ino}`;
      const first = scan.links.get(key);
      if (first !== undefined) {
        yield { type: "link", path, target: first, mode: portableMode(stat.mode, false), mtimeMs: stat.mtimeMs };
        return;
      }
      scan.links.set(key, path);
    }
    yield { type: "file", path, mode: portableMode(stat.mode, false), fd, stat };
  } finally {
    closeSync(fd);
  }
}

/** A symlink's target and lstat, read without following it; undefined when it went away or is no longer a link. */
function symlinkOf(parent: DirFd, name: string): { target: string; stat: Stats } | undefined {
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
