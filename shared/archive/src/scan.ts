import { closeSync, type Stats } from "node:fs";
import { readdir } from "node:fs/promises";
import { errnoOf, MAX_DIR_DEPTH, type DirFd, type FileOwner } from "./dir-fd.ts";
import { UnsafePathError } from "./errors.ts";
import { portableMode, symlinkOf } from "./pack.ts";

/**
 * One entry of a walked tree, by path relative to its root ("a/b", no "./").
 * A file comes with its open descriptor, valid until the consumer asks for
 * the next entry (the walk closes it then).
 */
export type ScannedEntry =
  | { type: "dir"; path: string; mode: number }
  | { type: "file"; path: string; mode: number; fd: number; stat: Stats }
  | { type: "symlink"; path: string; target: string; mtimeMs: number }
  /** Another name of a file already yielded (its path in target). */
  | { type: "link"; path: string; target: string };

/**
 * Every entry under root (not root itself), directories before what they
 * hold, children by name: the same walk and the same rules as packing a tar
 * (pack.ts) — each child opened through its parent's descriptor without
 * following a link, FIFOs, sockets and devices left out, and with owner only
 * that user's files (a hard link the sandbox planted to another user's file is
 * never read). Modes are the portable ones a tar gets.
 */
export async function* scanTree(root: DirFd, owner?: FileOwner): AsyncGenerator<ScannedEntry> {
  yield* scanChildren(root, "", 0, { owner, links: new Map() });
}

interface Scan {
  owner: FileOwner | undefined;
  /** dev:ino → path of a file already yielded. */
  links: Map<string, string>;
}

async function* scanChildren(dir: DirFd, prefix: string, depth: number, scan: Scan): AsyncGenerator<ScannedEntry> {
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

async function* scanEntry(parent: DirFd, name: string, path: string, depth: number, scan: Scan): AsyncGenerator<ScannedEntry> {
  const opened = parent.openEntry(name);
  if (opened === undefined) return;
  if (opened === "symlink") {
    const link = symlinkOf(parent, name);
    if (link) yield { type: "symlink", path, target: link.target, mtimeMs: link.stat.mtimeMs };
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
    if (!stat.isFile()) return;
    if (scan.owner && stat.uid !== scan.owner.uid) return;
    if (stat.nlink > 1) {
      const key = `${stat.dev}:${stat.ino}`;
      const first = scan.links.get(key);
      if (first !== undefined) {
        yield { type: "link", path, target: first };
        return;
      }
      scan.links.set(key, path);
    }
    yield { type: "file", path, mode: portableMode(stat.mode, false), fd, stat };
  } finally {
    closeSync(fd);
  }
}
