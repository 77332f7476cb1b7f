import { readdir, readFile, readlink, realpath } from "node:fs/promises";
import { sep } from "node:path";
import type { Logger } from "@paddock/logging";

/**
 * Kills the sandbox processes a previous runner process left on the host.
 * A PTY app dies with the runner (its terminal hangs up), but a piped app
 * (`tty: false`, its own process group) or anything that ignores SIGHUP keeps
 * running with no live record (found by `pnpm chaos`: a SIGKILLed runner's
 * piped apps survived its restart). They are found by their working
 * directory, under this runner's sessions dir, and their whole process group
 * is killed. A process that left its workspace (`cd /`) is not found: the
 * process backend is not a sandbox boundary (see ARCHITECTURE.md, Egress).
 */
/**
 * Resolves to the number of process groups (or lone processes) killed.
 * `reason` says in the log why they were left (a previous runner process, or
 * processes that escaped their app's process group at teardown).
 */
export async function killLeftoverProcesses(
  sessionsDir: string,
  log: Logger,
  reason = "left by a previous runner process",
  /** Spares processes working under `<sessionsDir>/<name>` when it answers true (a session still held). */
  spare: (name: string) => boolean = () => false,
): Promise<number> {
  let root: string;
  let entries: string[];
  try {
    root = (await realpath(sessionsDir)) + sep;
    entries = await readdir("/proc");
  } catch {
    return 0;
  }
  let killed = 0;
  const groups = new Set<number>();
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cwd = await readlink(`/proc/${entry}/cwd`);
      if (!cwd.startsWith(root) || spare(cwd.slice(root.length).split(sep)[0] ?? "")) continue;
      const stat = await readFile(`/proc/${entry}/stat`, "utf8");
      // Fields after "(comm) ": state, ppid, pgrp.
      const pgrp = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
      signal(Number(entry));
      if (Number.isInteger(pgrp) && pgrp > 1 && pgrp !== process.pid) {
        if (groups.has(pgrp)) continue;
        groups.add(pgrp);
        signal(-pgrp);
      }
      killed += 1;
    } catch {
      // gone meanwhile, or not ours to inspect
    }
  }
  if (killed > 0) log.warn({ killed }, `killed sandbox processes ${reason}`);
  return killed;
}

function signal(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
}
