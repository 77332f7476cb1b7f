/**
 * A session's processes on the host, by tree and by uid: they are not the
 * runner's children (bwrap's outer process is), so signals walk /proc and a
 * teardown waits by looking at /proc again.
 */
import { readdirSync, readFileSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import type { Logger } from "@paddock/logging";
import { signalSession } from "./spawn.ts";
import { pidsOfUid } from "./uid-allocator.ts";

/**
 * Sends sig to every process below the launch chain's first process (bwrap's
 * outer one, spared: it would die of most signals and take the sandbox down
 * before its processes saw the signal). Processes inside make process groups
 * of their own, so the group is not enough; orphans are reparented to the pid
 * namespace's init, itself the outer process's child, so the tree is whole.
 * True when the outer process is still there.
 */
export function signalTree(outerPid: number, sig: NodeJS.Signals): boolean {
  const children = new Map<number, number[]>();
  let found = false;
  for (const { pid, ppid } of processTable()) {
    if (pid === outerPid) found = true;
    children.set(ppid, [...(children.get(ppid) ?? []), pid]);
  }
  const stack = [...(children.get(outerPid) ?? [])];
  while (stack.length > 0) {
    const pid = stack.pop() ?? 0;
    try {
      process.kill(pid, sig);
    } catch {
      // exited meanwhile
    }
    stack.push(...(children.get(pid) ?? []));
  }
  return found;
}

function processTable(): Array<{ pid: number; ppid: number }> {
  const out: Array<{ pid: number; ppid: number }> = [];
  for (const entry of readdirSyncSafe("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readStatSync(entry);
    if (!stat) continue;
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    out.push({ pid: Number(entry), ppid });
  }
  return out;
}

function readdirSyncSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

function readStatSync(pid: string): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
}

/** How long a SIGKILLed session's processes may take to go before the runner says so (they are not children it could wait for). */
const KILL_SETTLE_MS = 5_000;
const KILL_POLL_MS = 10;

/**
 * Resolves once no live process of uid is left (zombies aside: the host's
 * init reaps them). The killed processes are no children of the runner, so
 * there is no exit to wait on: /proc is looked at again until they are gone.
 */
export async function untilUidGone(uid: number, log: Logger): Promise<void> {
  const deadline = Date.now() + KILL_SETTLE_MS;
  while (pidsOfUid(uid, { live: true }).length > 0) {
    if (Date.now() > deadline) {
      log.warn({ uid }, "sandbox processes still alive after SIGKILL");
      return;
    }
    signalSession(uid, "SIGKILL");
    await new Promise((resolve) => setTimeout(resolve, KILL_POLL_MS));
  }
}

/** SIGKILLs every process whose real uid matches; answers how many. One /proc scan. */
export async function killUids(match: (uid: number) => boolean): Promise<number> {
  let killed = 0;
  for (const entry of await readdir("/proc").catch(() => [] as string[])) {
    if (!/^\d+$/.test(entry)) continue;
    const status = await readFile(`/proc/${entry}/status`, "utf8").catch(() => "");
    const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? -1);
    if (uid < 0 || !match(uid)) continue;
    try {
      process.kill(Number(entry), "SIGKILL");
      killed++;
    } catch {
      // exited meanwhile
    }
  }
  return killed;
}

