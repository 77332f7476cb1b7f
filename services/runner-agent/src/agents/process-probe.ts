/**
 * A session's processes as its declared agents are judged by (issue 26): a
 * claimed pid found in the session's pid namespaces, a declared process
 * checked to still be the same one (host pid, start time and namespace:
 * a reused pid has another start time), and a process's ancestors walked to
 * the nearest declared one without ever leaving the pid namespace the walk
 * started in — the session cannot see past it, so neither does the walk.
 *
 * Everything is read from /proc on each call: liveness is never remembered.
 */
import { readdir, readFile, readlink } from "node:fs/promises";
import type { ProcessSeen } from "@paddock/contracts";
import type { UsageScope } from "../sandbox/usage.ts";

/** One process as /proc shows it. */
export interface ProcInfo {
  hostPid: number;
  ppid: number;
  pgid: number;
  uid: number;
  /** Clock ticks since boot when it started (stat field 22). */
  startTicks: number;
  /** Its pid namespace's inode, and its pid there (NSpid's last field). */
  pidNamespace: number;
  nsPid: number;
  zombie: boolean;
}

/** How far a resolve walks up (a corrupted or hostile chain must not spin). */
export const MAX_ANCESTOR_DEPTH = 64;

/** The session's own processes: its uid (bwrap), or its apps' process groups (process backend). */
export type ProcessScope = UsageScope;

function inScope(p: ProcInfo, scope: ProcessScope): boolean {
  return "uid" in scope ? p.uid === scope.uid : scope.groups.includes(p.pgid);
}

/** One process as /proc shows it now; undefined when it is gone or cannot be read. */
export async function readProc(hostPid: number, procRoot = "/proc"): Promise<ProcInfo | undefined> {
  const dir = `${procRoot}/${hostPid}`;
  try {
    const [stat, status, ns] = await Promise.all([readFile(`${dir}/stat`, "utf8"), readFile(`${dir}/status`, "utf8"), readlink(`${dir}/ns/pid`)]);
    // The command name may hold spaces and parentheses: fields start after the last ")".
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const nsMatch = /^pid:\[(\d+)\]$/.exec(ns);
    const nsPids = /^NSpid:\s+([\d\s]+)$/m.exec(status)?.[1]?.trim().split(/\s+/);
    const uid = /^Uid:\s+(\d+)/m.exec(status)?.[1];
    if (!nsMatch || !nsPids || uid === undefined || fields.length < 20) return undefined;
    return {
      hostPid,
      ppid: Number(fields[1]),
      pgid: Number(fields[2]),
      uid: Number(uid),
      startTicks: Number(fields[19]),
      pidNamespace: Number(nsMatch[1]),
      nsPid: Number(nsPids[nsPids.length - 1]),
      zombie: fields[0] === "Z" || fields[0] === "X",
    };
  } catch {
    return undefined;
  }
}

function seenOf(p: ProcInfo): ProcessSeen {
  return { hostPid: p.hostPid, startTicks: p.startTicks, pidNamespace: p.pidNamespace };
}

/**
 * The session's live processes whose pid in their own namespace is `pid`
 * (in `pidNamespace` when given). More than one: the pid is ambiguous across
 * the session's namespaces (each app and the exec'd commands have their own).
 */
export async function findProcesses(scope: ProcessScope, pid: number, pidNamespace?: number, procRoot = "/proc"): Promise<ProcessSeen[]> {
  const entries = await readdir(procRoot).catch(() => [] as string[]);
  const found: ProcessSeen[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const p = await readProc(Number(entry), procRoot);
    if (!p || p.zombie || p.nsPid !== pid || !inScope(p, scope)) continue;
    if (pidNamespace !== undefined && p.pidNamespace !== pidNamespace) continue;
    found.push(seenOf(p));
  }
  return found;
}

/** Whether the process that was seen is still there, still the session's, and still the same one. */
export async function stillAlive(scope: ProcessScope, seen: ProcessSeen, procRoot = "/proc"): Promise<boolean> {
  const p = await readProc(seen.hostPid, procRoot);
  return p !== undefined && !p.zombie && inScope(p, scope) && p.startTicks === seen.startTicks && p.pidNamespace === seen.pidNamespace;
}

/**
 * The index in `declared` of the nearest of start's ancestors (start itself
 * first) that is one of them, walking only through the session's processes
 * in start's pid namespace; undefined when the walk leaves it first.
 */
export async function resolveAncestor(scope: ProcessScope, start: ProcessSeen, declared: readonly ProcessSeen[], procRoot = "/proc"): Promise<number | undefined> {
  const key = (s: ProcessSeen) => `${s.hostPid}:${s.startTicks}:${s.pidNamespace}`;
  const index = new Map(declared.map((d, i) => [key(d), i] as const));
  let p = await readProc(start.hostPid, procRoot);
  for (let depth = 0; p && depth <= MAX_ANCESTOR_DEPTH; depth++) {
    if (p.zombie || !inScope(p, scope) || p.pidNamespace !== start.pidNamespace) return undefined;
    const hit = index.get(key(seenOf(p)));
    if (hit !== undefined) return hit;
    // Pid 1 of the namespace: its parent is outside (the launch chain), which the session cannot see.
    if (p.nsPid === 1 || p.ppid <= 0) return undefined;
    p = await readProc(p.ppid, procRoot);
  }
  return undefined;
}
