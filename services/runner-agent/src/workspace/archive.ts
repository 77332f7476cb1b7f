import type { Readable } from "node:stream";
import { ArchiveRejectedError, extractArchive as extract, type DirFd, type ExtractLimits, type ExtractOptions, type ExtractResult } from "@paddock/archive";
import { ArchiveRefusedError, WorkspaceTooLargeError } from "../errors.ts";

/** The safe archive code lives in @paddock/archive (the CLI extracts with the same rules). */
export { ARCHIVE_FORMAT, entryViolation, packDirectory, packInside, packTarget } from "@paddock/archive";

/**
 * Extracts a gzipped tar into dir with @paddock/archive's rules, as this
 * service's typed errors: a refused entry or invalid archive is
 * ArchiveRefusedError, an archive past limits WorkspaceTooLargeError.
 */
export async function extractArchive(source: Readable, dir: string | DirFd, limits?: ExtractLimits, opts?: ExtractOptions): Promise<ExtractResult> {
  try {
    return await extract(source, dir, limits, opts);
  } catch (err) {
    if (err instanceof ArchiveRejectedError) throw err.tooLarge ? new WorkspaceTooLargeError(err.reason, { cause: err }) : new ArchiveRefusedError(err.reason, { cause: err });
    throw err;
  }
}
