import { closeSync } from "node:fs";
import { checkName, DirFd, errnoOf, type FileOwner } from "./dir-fd.ts";
import { UnsafePathError } from "./errors.ts";

/**
 * The segments of a root-relative path: "" and "." are the root itself.
 * Throws for an absolute path, a `..` segment, a backslash or NUL, so the
 * result can only name something under the root.
 */
export function relativeSegments(path: string): string[] {
  if (path.startsWith("/")) throw new UnsafePathError("path must be relative");
  if (path.includes("\0") || path.includes("\\")) throw new UnsafePathError("path contains a forbidden character");
  const segments = path.split("/").filter((s) => s !== "" && s !== ".");
  if (segments.includes("..")) throw new UnsafePathError("path must not contain ..");
  return segments;
}

export type TargetKind = "directory" | "file";

/** A path resolved under a root, held by descriptor: later reads and writes go through it, never through the path again. */
export interface InsideTarget {
  kind: TargetKind;
  /** The directory itself, or (kind file) the file's parent. */
  dir: DirFd;
  /** kind file: the file's name in dir. */
  name?: string;
  /** Closes the held descriptor; call once the target's last use has ended. */
  close(): void;
}

/** Why a component could not be opened as a directory, as the public error. */
function componentError(code: string | undefined, create: boolean): UnsafePathError | undefined {
  if (code === "ENOENT" && !create) return new UnsafePathError("path not found", true);
  if (code === "ELOOP") return new UnsafePathError("path goes through a symbolic link");
  if (code === "ENOTDIR") return new UnsafePathError(create ? "path is not a directory" : "path is not a file or directory");
  return undefined;
}

/**
 * Opens root/segments one component at a time, each through its parent's
 * descriptor with O_NOFOLLOW (dir-fd.ts), refusing a component that is a
 * symlink or not a directory on the way: what was checked is what is held,
 * whatever the sandbox swaps meanwhile. With create, missing directories are
 * made; without, a missing component is an UnsafePathError with missing set,
 * and the last component may be a regular file. The root itself must not be a
 * symlink. Directories made are given to opts.owner when set.
 */
export async function resolveInside(root: string, segments: readonly string[], opts: { create: boolean; owner?: FileOwner | undefined }): Promise<InsideTarget> {
  let dir: DirFd;
  try {
    dir = DirFd.open(root, { follow: false });
  } catch {
    throw new UnsafePathError("workspace is not available", true);
  }
  try {
    for (const [i, segment] of segments.entries()) {
      checkName(segment);
      let next: DirFd;
      try {
        next = opts.create ? dir.childOrMake(segment, undefined, opts.owner) : dir.child(segment);
      } catch (err) {
        const code = errnoOf(err);
        if (code === "ENOTDIR" && !opts.create && i === segments.length - 1) {
          const file = fileTarget(dir, segment);
          if (file) return file;
        }
        throw componentError(code, opts.create) ?? err;
      }
      dir.close();
      dir = next;
    }
  } catch (err) {
    dir.close();
    throw err;
  }
  const held = dir;
  return { kind: "directory", dir: held, close: () => held.close() };
}

/** name in dir as a file target when it is a regular file (checked on its own descriptor). */
function fileTarget(dir: DirFd, name: string): InsideTarget | undefined {
  const opened = dir.openEntry(name);
  if (opened === undefined || opened === "symlink") return undefined;
  closeSync(opened.fd);
  if (!opened.stat.isFile()) return undefined;
  return { kind: "file", dir, name, close: () => dir.close() };
}
