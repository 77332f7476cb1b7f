import { lstat, mkdir } from "node:fs/promises";
import { join } from "node:path";
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

/**
 * Walks root/segments one component at a time with lstat, refusing any
 * component that is a symlink (a link the sandbox made could point anywhere)
 * or not a directory on the way. With create, missing directories are made;
 * without, a missing component is an UnsafePathError with missing set.
 * Resolves with the full path and what it is.
 */
export async function resolveInside(root: string, segments: readonly string[], opts: { create: boolean }): Promise<{ path: string; kind: TargetKind }> {
  let current = root;
  const rootStat = await lstat(root).catch(() => undefined);
  if (!rootStat?.isDirectory()) throw new UnsafePathError("workspace is not available", true);
  for (const [i, segment] of segments.entries()) {
    current = join(current, segment);
    const last = i === segments.length - 1;
    const st = await lstat(current).catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return undefined;
      throw err;
    });
    if (!st) {
      if (!opts.create) throw new UnsafePathError("path not found", true);
      await mkdir(current);
      continue;
    }
    if (st.isSymbolicLink()) throw new UnsafePathError("path goes through a symbolic link");
    if (st.isDirectory()) continue;
    if (last && st.isFile() && !opts.create) return { path: current, kind: "file" };
    throw new UnsafePathError(opts.create ? "path is not a directory" : "path is not a file or directory");
  }
  return { path: current, kind: "directory" };
}
