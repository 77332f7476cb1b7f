/**
 * Descriptor-relative file system access. A workspace is written by the
 * sandbox while the runner packs or extracts it, so a path the runner checked
 * (lstat: "a directory") can be a symlink by the time it is used. Node has no
 * openat2, so on Linux every operation names its target as
 * `/proc/self/fd/<dir>/<name>`: the kernel resolves the magic link to the
 * directory inode this process holds open (not to a path looked up again),
 * then looks up one component in it. With O_NOFOLLOW (and mkdir, unlink,
 * rename, link, symlink and lstat, which never follow the last component)
 * nothing resolves through a symlink, and nothing leaves the held directory.
 *
 * Where /proc/self/fd is missing (the CLI on macOS) `at` falls back to a
 * path joined to the directory's opening path: the same checks, without the
 * race guarantee. Only the runner works on a directory another party writes.
 */
import { closeSync, constants as fsc, existsSync, fchownSync, fstatSync, lstatSync, mkdirSync, openSync, type Stats } from "node:fs";
import { join } from "node:path";
import { UnsafePathError } from "./errors.ts";

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK, O_NOCTTY } = fsc;

/** Whether /proc/self/fd/<fd>/<name> resolves from a held descriptor (Linux). */
export const DESCRIPTOR_RELATIVE = process.platform === "linux" && existsSync("/proc/self/fd");

/** Flags to open an entry for reading that can neither follow a link nor block (a FIFO), nor become a terminal. */
export const OPEN_ENTRY_FLAGS = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;

/** Directories held open at once by one walk: a tree deeper than this is refused rather than exhausting descriptors. */
export const MAX_DIR_DEPTH = 256;

/**
 * Who owns what the runner writes into a directory another user (a
 * sandboxed session's uid) writes: each new inode is given to it through its
 * own descriptor (fchown) or, for a symlink, by its held parent without
 * following it (lchown), never by a path looked up again afterwards.
 */
export interface FileOwner {
  uid: number;
  gid: number;
}

/** Throws unless name is one path component that stays in its directory. */
export function checkName(name: string): void {
  if (name === "" || name === "." || name === ".." || name.includes("/") || name.includes("\0")) throw new UnsafePathError("not a single path component");
}

/** A directory held open by descriptor; everything below it is reached through it. */
export class DirFd {
  private closed = false;

  private constructor(
    readonly fd: number,
    /** The path it was opened by: only for the fallback without /proc, never for the race-free path. */
    private readonly openedAs: string,
  ) {}

  /**
   * Opens a directory by path. follow: false refuses a root that is itself a
   * symlink (the runner's workspaces); the CLI's local directory may be one.
   */
  static open(path: string, opts: { follow: boolean }): DirFd {
    if (path.includes("\0")) throw new UnsafePathError("path contains NUL");
    const fd = openSync(path, O_RDONLY | O_DIRECTORY | O_NOCTTY | (opts.follow ? 0 : O_NOFOLLOW));
    return new DirFd(fd, path);
  }

  /** The path of name inside this directory, resolved from the descriptor. */
  at(name: string): string {
    checkName(name);
    this.checkOpen();
    return DESCRIPTOR_RELATIVE ? `/proc/self/fd/${this.fd}/${name}` : join(this.openedAs, name);
  }

  /** A path naming this directory itself (to list it). */
  self(): string {
    this.checkOpen();
    return DESCRIPTOR_RELATIVE ? `/proc/self/fd/${this.fd}` : this.openedAs;
  }

  /**
   * Opens child directory name without following a symlink: ELOOP or ENOTDIR
   * (as thrown by open) when it is a link or not a directory, ENOENT when missing.
   */
  child(name: string): DirFd {
    let fd: number;
    try {
      fd = openSync(this.at(name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NOCTTY);
    } catch (err) {
      // With O_DIRECTORY a link is ENOTDIR; say ELOOP, so the caller can name it. (Only the message depends on this.)
      if (errnoOf(err) === "ENOTDIR" && isSymlink(this.at(name))) throw Object.assign(new Error(`${name}: symbolic link`), { code: "ELOOP" });
      throw err;
    }
    return new DirFd(fd, DESCRIPTOR_RELATIVE ? "" : join(this.openedAs, name));
  }

  /** Opens child directory name, making it first (with mode, given to owner when set) when missing. */
  childOrMake(name: string, mode = 0o755, owner?: FileOwner): DirFd {
    try {
      return this.child(name);
    } catch (err) {
      if (errnoOf(err) !== "ENOENT") throw err;
    }
    let made = false;
    try {
      mkdirSync(this.at(name), mode | 0o700);
      made = true;
    } catch (err) {
      // Made meanwhile (by the sandbox): opening it below says what it is.
      if (errnoOf(err) !== "EEXIST") throw err;
    }
    const dir = this.child(name);
    // Whatever is held now is a directory (O_DIRECTORY|O_NOFOLLOW): chowned by descriptor, so a swap cannot redirect it.
    if (made && owner) {
      try {
        fchownSync(dir.fd, owner.uid, owner.gid);
      } catch (err) {
        dir.close();
        throw err;
      }
    }
    return dir;
  }

  /** An entry opened by descriptor (not following a link, not blocking on a FIFO) and what it is; undefined when gone. */
  openEntry(name: string): { fd: number; stat: Stats } | "symlink" | undefined {
    let fd: number;
    try {
      fd = openSync(this.at(name), OPEN_ENTRY_FLAGS);
    } catch (err) {
      const code = errnoOf(err);
      if (code === "ELOOP") return "symlink";
      // Gone while walked, or a socket (ENXIO): nothing to pack.
      if (code === "ENOENT" || code === "ENXIO") return undefined;
      throw err;
    }
    try {
      return { fd, stat: fstatSync(fd) };
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /** Wraps an already open directory descriptor (from openEntry); takes ownership of it. */
  adopt(fd: number, name: string): DirFd {
    return new DirFd(fd, DESCRIPTOR_RELATIVE ? "" : join(this.openedAs, name));
  }

  stat(): Stats {
    this.checkOpen();
    return fstatSync(this.fd);
  }

  /** Idempotent. Every later use throws: the number may already name another file. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeSync(this.fd);
  }

  private checkOpen(): void {
    if (this.closed) throw new UnsafePathError("directory descriptor already closed");
  }
}

function isSymlink(path: string): boolean {
  try {
    return lstatSync(path).isSymbolicLink();
  } catch {
    return false;
  }
}

export function errnoOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown }).code;
  return typeof code === "string" ? code : undefined;
}
