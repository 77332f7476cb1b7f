import { execFile } from "node:child_process";
import { mkdir, readdir, rm } from "node:fs/promises";
import { promisify } from "node:util";
import type { Logger } from "@paddock/logging";
import { killLeftoverProcesses } from "./leftovers.ts";

const run = promisify(execFile);

/**
 * Readies the directory holding this runner's sandboxes: what a previous
 * process left there (directories and the processes still working in them)
 * is removed, and the fresh directory is marked as a top of directory
 * hierarchies (markTopDirectory).
 */
export async function prepareSessionsDir(dir: string, log: Logger): Promise<void> {
  await removeLeftoverSessions(dir, log);
  await mkdir(dir, { recursive: true });
  const marked = await markTopDirectory(dir);
  log.info({ marked }, marked ? "sandboxes spread over the filesystem's block groups" : "sessions directory not marked (no ext2/3/4 top-directory attribute here)");
}

/**
 * A fresh process holds no sessions: the previous one's sandboxes are gone
 * with it (their processes are killed here: piped apps would survive it), so
 * their directories are garbage.
 */
async function removeLeftoverSessions(dir: string, log: Logger): Promise<void> {
  let entries: string[];
  try {
    entries = await readdir(dir);
  } catch {
    return;
  }
  if (entries.length === 0) return;
  await killLeftoverProcesses(dir, log);
  log.info({ count: entries.length }, "removing session directories left by a previous process");
  await rm(dir, { recursive: true, force: true });
}

/**
 * Sets ext2/3/4's top-directory attribute (`chattr +T`, FS_TOPDIR_FL) on dir,
 * so the Orlov allocator places each sandbox made in it in a block group of
 * its own choosing instead of beside its siblings. A restore creates
 * thousands of files at once; beside a sandbox deleted in the last minutes
 * that was 10-20x slower on this project's machines, whose ext4 has no
 * journal: without one, ext4 skips every inode freed in the last 60 s (360 s
 * while its table block is dirty) with a buffer lookup each, on every new
 * file (perf: `find_inode_bit` → `recently_deleted`). 2,590 files took
 * 1.4-2.2 s of kernel time in a plain directory of /tmp and 0.1 s under a
 * marked one, back to back. Best effort: false where the filesystem has no
 * such attribute (tmpfs, xfs) or chattr is missing.
 */
export async function markTopDirectory(dir: string): Promise<boolean> {
  try {
    await run("chattr", ["+T", dir], { timeout: 5_000 });
    return true;
  } catch {
    return false;
  }
}
