/**
 * The runner's one file watcher (watch-mode reloads and GET …/files/watch):
 * inotify through node's non-recursive fs.watch, one per directory, walked by
 * descriptor. Node 20's `recursive: true` on Linux is not used: it watches the
 * target of every symlink it meets (inotify follows the path it is given) and
 * puts a watch on every file. Here a directory is opened one component at a
 * time with O_NOFOLLOW (`DirFd`), and the watch is added on
 * `/proc/self/fd/<held>/.`, which the kernel resolves to the held inode: a
 * symlink, or a directory swapped for one meanwhile, is never watched, so
 * nothing outside the workspace is. A symlink's own name still changes like
 * any entry (it is reported, never followed).
 */
import { readdirSync, watch, type FSWatcher } from "node:fs";
import { DirFd, relativeSegments } from "@paddock/archive";

/** Deeper directories are not watched (as archives refuse trees deeper than this). */
const MAX_DIR_DEPTH = 256;

/** What fs.watch says: `rename` (a name appeared or went: made, removed, renamed) or `change` (contents or attributes). */
export type RawChange = "rename" | "change";

export interface TreeWatchOptions {
  /** Directories watched at most (inotify watches are a per-user kernel budget); past it onOverflow, and deeper changes are missed. */
  maxDirs: number;
  /** Whether to watch below the root (false: the root directory's own entries only). */
  recursive: boolean;
  /** Not descended into (paths relative to the workspace), e.g. the reload's ignored `node_modules`. */
  skipDir?: (relativePath: string) => boolean;
  /** path is relative to the workspace. */
  onChange(path: string, raw: RawChange): void;
  onOverflow?(): void;
  /** The watched root went away or was replaced: the watcher has closed itself. */
  onEnd?(): void;
}

export interface TreeWatch {
  close(): void;
  readonly dirCount: number;
}

/** Opens workspace/segments as a directory, one component at a time without following a link; undefined when it is not one (now). */
export function openDirInside(workspace: string, segments: readonly string[]): DirFd | undefined {
  let dir: DirFd;
  try {
    dir = DirFd.open(workspace, { follow: false });
  } catch {
    return undefined;
  }
  try {
    for (const s of segments) {
      const next = dir.child(s);
      dir.close();
      dir = next;
    }
    return dir;
  } catch {
    dir.close();
    return undefined;
  }
}

const join = (rel: string, name: string) => (rel === "" ? name : `${rel}/${name}`);

/**
 * Watches workspace/root (a directory, relative segments already checked)
 * and below it. Throws when root is not a directory reached without a link.
 * Entries present at the start are not reported; those of a directory that
 * appears later are (as `rename`), since they may have been made before its
 * watch was added.
 */
export function watchTree(workspace: string, rootPath: string, opts: TreeWatchOptions): TreeWatch {
  const rootSegments = relativeSegments(rootPath);
  const root = rootSegments.join("/");
  const dirs = new Map<string, { w: FSWatcher; dev: number; ino: number }>();
  let closed = false;
  let overflowed = false;

  const drop = (rel: string) => {
    for (const [key, d] of dirs) {
      if (key === rel || key.startsWith(`${rel}/`) || rel === "") {
        d.w.close();
        dirs.delete(key);
      }
    }
  };
  const close = () => {
    if (closed) return;
    closed = true;
    drop("");
  };
  const end = () => {
    if (closed) return;
    close();
    opts.onEnd?.();
  };

  /** Watches dir (held) at rel and, recursively, the directories in it; announce: report what it holds. */
  const add = (dir: DirFd, rel: string, depth: number, announce: boolean) => {
    if (closed || dirs.has(rel)) return;
    if (dirs.size >= opts.maxDirs || depth > MAX_DIR_DEPTH) {
      if (!overflowed) opts.onOverflow?.();
      overflowed = true;
      return;
    }
    const st = dir.stat();
    const w = watch(`${dir.self()}/.`, { persistent: false }, (event, name) => onEvent(rel, event as RawChange, name));
    // The directory went away under a pending event: its parent reports the name.
    w.on("error", () => drop(rel));
    dirs.set(rel, { w, dev: st.dev, ino: st.ino });
    let entries;
    try {
      entries = readdirSync(dir.self(), { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const childRel = join(rel, e.name);
      if (announce) opts.onChange(childRel, "rename");
      // d_type: a symlink is never isDirectory(), and child() refuses one swapped in since.
      if (!opts.recursive || !e.isDirectory() || opts.skipDir?.(childRel)) continue;
      let child: DirFd;
      try {
        child = dir.child(e.name);
      } catch {
        continue;
      }
      try {
        add(child, childRel, depth + 1, announce);
      } finally {
        child.close();
      }
    }
  };

  /** Whether rel still names the directory watched there (not removed, renamed away or replaced). */
  const stillThere = (rel: string): boolean => {
    const d = dirs.get(rel);
    const held = openDirInside(workspace, rel === "" ? [] : rel.split("/"));
    if (!d || !held) {
      held?.close();
      return false;
    }
    try {
      const st = held.stat();
      return st.dev === d.dev && st.ino === d.ino;
    } finally {
      held.close();
    }
  };

  const onEvent = (rel: string, event: RawChange, name: string | Buffer | null) => {
    if (closed) return;
    // "." is the watched directory itself (deleted or moved): our watch path ends in "/.", so no entry can be named so.
    if (name === null || name === ".") {
      if (!stillThere(rel)) {
        if (rel === root) end();
        else drop(rel);
      }
      return;
    }
    const childRel = join(rel, String(name));
    opts.onChange(childRel, event);
    if (event !== "rename") return;
    // A name came or went: a watched directory gone, or a new directory to watch.
    if (dirs.has(childRel) && !stillThere(childRel)) drop(childRel);
    if (!opts.recursive || dirs.has(childRel) || opts.skipDir?.(childRel)) return;
    const held = openDirInside(workspace, childRel.split("/"));
    if (!held) return;
    try {
      add(held, childRel, childRel.split("/").length - rootSegments.length, true);
    } finally {
      held.close();
    }
  };

  const held = openDirInside(workspace, rootSegments);
  if (!held) throw new Error(`${root === "" ? "workspace" : root}: not a directory reached without a symbolic link`);
  try {
    add(held, root, 0, false);
  } finally {
    held.close();
  }
  return {
    close,
    get dirCount() {
      return dirs.size;
    },
  };
}
