import { posix } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import * as tar from "tar";
import { ArchiveRefusedError } from "./errors.ts";

/** The only archive format this runner writes and reads. */
export const ARCHIVE_FORMAT = "tar+gzip";

/** Entry types a workspace archive may contain; devices, FIFOs and anything else are refused. */
const allowedTypes: ReadonlySet<string> = new Set(["File", "OldFile", "ContiguousFile", "Directory", "SymbolicLink", "Link"]);
const packedTypes: ReadonlySet<string> = new Set(["File", "Directory", "SymbolicLink"]);

/**
 * A gzipped tar of everything under dir, as a pull-based web stream: the
 * archive is produced as the consumer reads it and never held in memory.
 * Only regular files, directories and symlinks (not followed) are packed;
 * uid/gid and other host specifics are left out (portable).
 */
export function packDirectory(dir: string): ReadableStream<Uint8Array> {
  const pack = tar.c(
    {
      gzip: true,
      cwd: dir,
      portable: true,
      follow: false,
      filter: (_path, stat) => "isFile" in stat && packedTypes.has(statType(stat)),
    },
    ["."],
  );
  const chunks = pack[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const next = await chunks.next();
        if (next.done) controller.close();
        else controller.enqueue(new Uint8Array(next.value.buffer, next.value.byteOffset, next.value.byteLength));
      },
      async cancel() {
        await chunks.return?.();
      },
    },
    { highWaterMark: 0 },
  );
}

function statType(stat: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean }): string {
  if (stat.isFile()) return "File";
  if (stat.isDirectory()) return "Directory";
  if (stat.isSymbolicLink()) return "SymbolicLink";
  return "Other";
}

/**
 * Why an entry may not be extracted under the target directory, or undefined
 * when it is fine. Pure string checks on the raw header, before node-tar's
 * own (stricter-than-default) checks run as a second line.
 */
export function entryViolation(entry: { path: string; type: string; linkpath?: string | undefined }): string | undefined {
  if (!allowedTypes.has(entry.type)) return `unsupported entry type ${entry.type}`;
  const path = entry.path.replaceAll("\\", "/");
  if (path.startsWith("/") || /^[A-Za-z]:/.test(path)) return "absolute path";
  if (path.split("/").includes("..")) return "path contains ..";
  if (entry.type === "SymbolicLink" || entry.type === "Link") {
    const link = (entry.linkpath ?? "").replaceAll("\\", "/");
    if (link === "") return "empty link target";
    if (link.startsWith("/")) return "absolute link target";
    // A symlink resolves from its own directory, a hard link from the archive root.
    const base = entry.type === "SymbolicLink" ? posix.dirname(path) : ".";
    const resolved = posix.normalize(posix.join(base, link));
    if (resolved === ".." || resolved.startsWith("../")) return "link escapes the workspace";
  }
  return undefined;
}

/**
 * Extracts a gzipped tar from source into dir (which must exist). Refuses the
 * whole archive on the first entry that is absolute, climbs out with `..`,
 * links outside dir or is not a file, directory or link: that entry is never
 * written, and the call rejects with ArchiveRefusedError. Owners are never
 * applied, even as root.
 */
export async function extractArchive(source: Readable, dir: string): Promise<void> {
  let refused: string | undefined;
  const extractor = tar.x({
    cwd: dir,
    strict: true,
    preserveOwner: false,
    noChmod: false,
    filter: (_path, entry) => {
      if (refused !== undefined) return false;
      if (!("type" in entry)) return false;
      refused = entryViolation({ path: entry.header.path ?? entry.path, type: entry.type, linkpath: entry.header.linkpath ?? entry.linkpath });
      return refused === undefined;
    },
  });
  try {
    await pipeline(source, extractor);
  } catch (err) {
    if (refused !== undefined) throw new ArchiveRefusedError(refused);
    const code = (err as { tarCode?: unknown; code?: unknown }).tarCode ?? (err as { code?: unknown }).code;
    throw new ArchiveRefusedError(typeof code === "string" ? `invalid archive (${code})` : "invalid archive");
  }
  if (refused !== undefined) throw new ArchiveRefusedError(refused);
}
