import { rm } from "node:fs/promises";
import type { Stack } from "@paddock/testing";

/**
 * Directories of finished benchmarks, removed once every benchmark is done.
 * This machine's root ext4 has no journal, and without one ext4 will not
 * reuse an inode freed in the last 60 s (360 s while its table block is
 * dirty): each new file scans past every such inode (perf: `find_inode_bit`
 * → `recently_deleted`). Deleting one run's ~10,000 files right before the
 * next run's checkpoint restore made that restore's file creation 10-20x
 * slower (1-2.5 s of kernel time for 2,590 files, against 0.05-0.1 s), so no
 * benchmark's cleanup may land on another's measured path.
 */
const leftovers: string[] = [];

/** Stops a stack and keeps its data dir and NATS store until removeLeftovers. */
export async function stopStackKeepingData(stack: Stack): Promise<void> {
  await stack.stop({ keepData: true });
  leftovers.push(stack.dataDir, stack.nats.storeDir);
}

export function removeLater(dir: string): void {
  leftovers.push(dir);
}

export async function removeLeftovers(): Promise<void> {
  for (const dir of leftovers.splice(0)) await rm(dir, { recursive: true, force: true });
}
