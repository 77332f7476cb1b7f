import { randomBytes } from "node:crypto";
import { closeSync, fchownSync, futimesSync, lchownSync, linkSync, openSync, renameSync, symlinkSync, write, writeSync } from "node:fs";
import { promisify } from "node:util";
import { posix } from "node:path";
import { Parser, type ReadEntry } from "tar";
import { errnoOf, MAX_DIR_DEPTH, type DirFd, type FileOwner } from "./dir-fd.ts";
import { ArchiveRejectedError } from "./errors.ts";
// A new file only (fresh-file.ts): never truncates or writes through something already there (a link, a FIFO, another name of a file).
import { CREATE_FLAGS, openFresh, unlinkQuietly } from "./fresh-file.ts";


/** Files larger than this are written with overlapped asynchronous writes (see writeFile). */
const OVERLAPPED_WRITE_MIN_BYTES = 1024 * 1024;
/** Writes of one file in flight at once. */
const OVERLAPPED_WRITES = 4;

const writeAsync = promisify(write);

/** All of chunk at offset `at` of fd. */
async function writeFully(fd: number, chunk: Buffer, at: number): Promise<void> {
  for (let done = 0; done < chunk.length; ) done += (await writeAsync(fd, chunk, done, chunk.length - done, at + done)).bytesWritten;
}

/** Directories kept open between entries (most archives list a directory's entries together). */
const MAX_CACHED_DIRS = 64;

/** Observes extraction; the race tests act between an entry's directory being held and the entry being written. */
export interface UnpackHooks {
  beforeEntry?: (path: string) => void;
}

export interface UnpackOptions {
  hooks?: UnpackHooks | undefined;
  /** Gives every inode made to this user as it is made (a sandboxed session's workspace). */
  owner?: FileOwner | undefined;
  /**
   * Writes each file's bytes by its descriptor instead of from the archive,
   * whose file entries are then empty: called with the entry's path (no
   * leading "./") and the new inode's descriptor, which stays open until the
   * returned promise settles. A restore that has the bytes elsewhere (a
   * checkpoint's chunks) still goes through every check of the extraction.
   */
  fill?: ((path: string, fd: number) => Promise<void>) | undefined;
}

/** The segments of an archive path; "." and empty ones dropped. Paths were checked by entryViolation; `..` here is a bug, refused. */
function segmentsOf(path: string): string[] {
  const segments = path.split("/").filter((s) => s !== "" && s !== ".");
  if (segments.includes("..")) throw new ArchiveRejectedError("path contains ..");
  return segments;
}

/** An fs failure on one entry as the archive's refusal, naming what the workspace held in the way. */
function refusal(err: unknown, path: string): ArchiveRejectedError {
  if (err instanceof ArchiveRejectedError) return err;
  const code = errnoOf(err);
  if (code === "ELOOP") return new ArchiveRejectedError(`${path}: goes through a symbolic link in the workspace`);
  if (code === "ENOTDIR") return new ArchiveRejectedError(`${path}: a file in the workspace is in the way of a directory`);
  if (code === "EISDIR" || code === "ENOTEMPTY" || code === "EEXIST") return new ArchiveRejectedError(`${path}: a directory in the workspace is in the way`);
  return new ArchiveRejectedError(`${path}: cannot be written${code ? ` (${code})` : ""}`);
}

/**
 * A tar parser that places each entry under root through descriptors only
 * (dir-fd.ts): each parent directory is opened component by component with
 * O_NOFOLLOW from root's descriptor (made when missing), and the entry is
 * created in the held parent. A file is always a new inode (O_CREAT|O_EXCL,
 * under a temporary name renamed over what was there), so no existing link,
 * FIFO or hard link is written through. A symlink anywhere on an entry's
 * path refuses the archive. With an owner, each directory, file and symlink
 * made is chowned as it is made: a file and a directory by their own
 * descriptor, a symlink in its held parent without following it. `accept` vets each entry first (entryViolation,
 * limits); `refuse` stops the extraction. `release` closes the held
 * directories once the parser is done with (root stays the caller's).
 */
export function descriptorUnpacker(
  root: DirFd,
  accept: (entry: ReadEntry) => boolean,
  refuse: (err: ArchiveRejectedError) => void,
  opts: UnpackOptions = {},
): { parser: Parser; release: () => void; idle: (stopped: boolean) => Promise<void> } {
  const { hooks, owner, fill } = opts;
  let released = false;
  const dirs = new Map<string, DirFd>();
  const clearDirs = (): void => {
    for (const d of dirs.values()) d.close();
    dirs.clear();
  };

  /** The directory at segments, held open; made (with mode, owner always rwx) when missing. */
  const dirAt = (segments: readonly string[], mode?: number): DirFd => {
    if (segments.length > MAX_DIR_DEPTH) throw new ArchiveRejectedError(`path deeper than ${MAX_DIR_DEPTH} levels`);
    if (segments.length === 0) return root;
    const key = segments.join("/");
    const cached = dirs.get(key);
    if (cached) return cached;
    const parent = dirAt(segments.slice(0, -1));
    const dir = parent.childOrMake(segments[segments.length - 1] as string, mode, owner);
    dirs.set(key, dir);
    return dir;
  };

  /** Creates name in dir with make(path); when something is there, makes it under a fresh name and renames it over. */
  const place = <T>(dir: DirFd, name: string, make: (path: string) => T, done: (made: T) => void): void => {
    let made: T;
    try {
      made = make(dir.at(name));
    } catch (err) {
      if (errnoOf(err) !== "EEXIST") throw err;
      const tmp = `.paddock-tmp-${randomBytes(6).toString("hex")}`;
      made = make(dir.at(tmp));
      try {
        done(made);
        renameSync(dir.at(tmp), dir.at(name));
      } catch (renameErr) {
        unlinkQuietly(dir, tmp);
        throw renameErr;
      }
      return;
    }
    done(made);
  };

  const onEntry = (entry: ReadEntry): void => {
    if (released) throw new ArchiveRejectedError("extraction has ended");
    // Between entries only: within one, every directory it was handed stays open.
    if (dirs.size >= MAX_CACHED_DIRS) clearDirs();
    const segments = segmentsOf(entry.path);
    const name = segments[segments.length - 1];
    const parent = dirAt(segments.slice(0, -1));
    hooks?.beforeEntry?.(entry.path);
    if (name === undefined) return void entry.resume(); // the root itself
    switch (entry.type) {
      case "Directory":
        dirAt(segments, (entry.mode ?? 0o755) & 0o777);
        entry.resume();
        return;
      case "SymbolicLink":
        place(
          parent,
          name,
          (path) => {
            symlinkSync(entry.linkpath ?? "", path);
            // path is /proc/self/fd/<parent>/<name>: lchown acts on the link just made, never on what it names.
            if (owner) lchownSync(path, owner.uid, owner.gid);
          },
          () => undefined,
        );
        entry.resume();
        return;
      case "Link": {
        const target = segmentsOf(posix.normalize(entry.linkpath ?? ""));
        const targetName = target[target.length - 1];
        if (targetName === undefined) throw new ArchiveRejectedError(`${entry.path}: empty link target`);
        const from = dirAt(target.slice(0, -1)).at(targetName);
        place(parent, name, (path) => linkSync(from, path), () => undefined);
        entry.resume();
        return;
      }
      default:
        writeFile(parent, name, entry, segments.join("/"));
    }
  };

  /** Files whose overlapped writes are still in flight: extraction is over only once these settle. */
  const writing = new Set<Promise<void>>();
  /** Files still open, each with how to give it up (an extraction stopped mid-entry never ends it). */
  const open = new Set<() => void>();

  /** A file's bytes as they arrive, into a new inode; renamed over an existing name once complete. */
  const writeFile = (parent: DirFd, name: string, entry: ReadEntry, path: string): void => {
    const mode = (entry.mode ?? 0o644) & 0o777;
    let fd: number | undefined = openFresh(parent, name, mode);
    let tmp: string | undefined;
    if (fd === undefined) {
      tmp = `.paddock-tmp-${randomBytes(6).toString("hex")}`;
      fd = openSync(parent.at(tmp), CREATE_FLAGS, mode);
    }
    const file = fd;
    if (owner) {
      try {
        fchownSync(file, owner.uid, owner.gid);
      } catch (err) {
        closeSync(file);
        if (tmp !== undefined) unlinkQuietly(parent, tmp);
        throw err;
      }
    }
    // A large file's writes go to the thread pool, a few at a time at their offsets, while the parser
    // goes on (the entry paused past that many); a small one's are synchronous (fewer round trips).
    // A filled file is written by fill while the parser goes on.
    const overlapped = fill !== undefined || (entry.size ?? 0) > OVERLAPPED_WRITE_MIN_BYTES;
    let offset = 0;
    let inFlight = 0;
    let ended = false;
    let failed = false;
    let closed = false;
    let settle = (): void => undefined;
    if (overlapped) writing.add(new Promise<void>((resolve) => (settle = resolve)));
    // The descriptor is closed only once no write is in flight: its number could name another file by then.
    const close = (): void => {
      if (closed || inFlight > 0) return;
      closed = true;
      open.delete(abandon);
      closeSync(file);
      if (failed && tmp !== undefined) unlinkQuietly(parent, tmp);
      settle();
    };
    const fail = (err: unknown): void => {
      if (failed) return;
      failed = true;
      close();
      entry.resume();
      refuse(refusal(err, entry.path));
    };
    const finish = (): void => {
      if (failed) return;
      try {
        if (entry.mtime) futimesSync(file, entry.mtime, entry.mtime);
        if (tmp !== undefined) renameSync(parent.at(tmp), parent.at(name));
      } catch (err) {
        fail(err);
        return;
      }
      failed = true; // done: nothing left to undo
      tmp = undefined;
      close();
    };
    const abandon = (): void => {
      failed = true;
      close();
    };
    open.add(abandon);
    if (fill) {
      inFlight += 1;
      fill(path, file).then(
        () => {
          inFlight -= 1;
          if (failed) return close();
          if (ended) finish();
        },
        (err: unknown) => {
          inFlight -= 1;
          fail(err);
          close();
        },
      );
    }
    entry.on("data", (chunk: Buffer) => {
      if (failed) return;
      if (fill) return fail(new ArchiveRejectedError(`${entry.path}: carries bytes where they are filled`));
      if (!overlapped) {
        try {
          for (let at = 0; at < chunk.length; ) at += writeSync(file, chunk, at, chunk.length - at);
        } catch (err) {
          fail(err);
        }
        return;
      }
      const at = offset;
      offset += chunk.length;
      inFlight += 1;
      if (inFlight >= OVERLAPPED_WRITES) entry.pause();
      writeFully(file, chunk, at).then(
        () => {
          inFlight -= 1;
          if (failed) return close();
          if (ended && inFlight === 0) finish();
          else entry.resume();
        },
        (err: unknown) => {
          inFlight -= 1;
          fail(err);
          close();
        },
      );
    });
    entry.on("end", () => {
      ended = true;
      if (inFlight === 0) finish();
    });
  };

  const parser = new Parser({
    strict: true,
    filter: (_path, entry) => "type" in entry && accept(entry),
    onReadEntry: (entry) => {
      try {
        onEntry(entry);
      } catch (err) {
        entry.resume();
        refuse(refusal(err, entry.path));
      }
    },
  });
  // Once released no descriptor is used again: its number may already name another file.
  const release = (): void => {
    released = true;
    clearDirs();
  };
  /** Resolves once every file's writes have landed (or failed) and its descriptor is closed; after a stop, gives up what is still open. */
  const idle = async (stopped: boolean): Promise<void> => {
    if (stopped) for (const abandon of [...open]) abandon();
    await Promise.all(writing);
  };
  return { parser, release, idle };
}
