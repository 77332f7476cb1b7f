import { randomUUID } from "node:crypto";
import { rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import type { Logger } from "@paddock/logging";

/** Prefix of a sandbox directory on its way out; never a session id (ids do not start with a dot). */
export const DISCARDED_PREFIX = ".discarded-";

/**
 * Removes a sandbox directory without making the caller wait for the disk:
 * the directory is renamed aside (one syscall, so its path is free for a
 * resume at once) and deleted in the background. Deleting a 100 MB workspace
 * of a few thousand files took 130-150 ms on the cold-suspend path (issue 8).
 * A crash before the delete ends leaves the renamed directory in the
 * sessions dir, which a fresh runner process removes whole at boot. Where the
 * rename fails (the directory is gone, or on another filesystem) it is
 * removed in place and waited for. Resolves once dir's path is free;
 * `deleted` settles when the bytes are gone too (never rejects).
 */
export async function removeDirSoon(dir: string, log: Logger): Promise<{ deleted: Promise<void> }> {
  const aside = join(dirname(dir), `${DISCARDED_PREFIX}${basename(dir)}-${randomUUID()}`);
  try {
    await rename(dir, aside);
  } catch {
    await rm(dir, { recursive: true, force: true });
    return { deleted: Promise.resolve() };
  }
  const deleted = rm(aside, { recursive: true, force: true }).catch((err: unknown) => log.warn({ err, dir: aside }, "discarded sandbox directory not removed"));
  return { deleted };
}
