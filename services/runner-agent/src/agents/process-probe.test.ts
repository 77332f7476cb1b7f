/**
 * The process probe against real processes in real pid namespaces (as root:
 * unshare, setpriv): a pid found in exactly the namespace named, ambiguous
 * across two, a process judged gone once it exited or when its start time
 * differs (a reused pid), and an ancestor walk that finds the nearest
 * declared process and never crosses into another pid namespace or past a
 * process that is not the session's.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readdir } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findProcesses, readProc, resolveAncestor, stillAlive, type ProcInfo } from "./process-probe.ts";

const UID = 400_000 + (process.pid % 1_000);
const children: ChildProcess[] = [];

/** A pid namespace whose pid 1 (bash, as UID) runs `inner`; READY once it forked it (or once `inner` says it, `innerSaysReady`). */
function namespaceTree(inner: string, innerSaysReady = false): Promise<ChildProcess> {
  const script = innerSaysReady ? `${inner} & wait` : `${inner} & echo READY; wait`;
  const child = spawn("unshare", ["--pid", "--fork", "--mount-proc", "setpriv", `--reuid=${UID}`, `--regid=${UID}`, "--clear-groups", "bash", "-c", script], { stdio: ["ignore", "pipe", "inherit"] });
  children.push(child);
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.stdout?.on("data", (b: Buffer) => {
      if (b.toString().includes("READY")) resolve(child);
    });
  });
}

async function procsOfUid(): Promise<ProcInfo[]> {
  const out: ProcInfo[] = [];
  for (const e of await readdir("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    const p = await readProc(Number(e));
    if (p && p.uid === UID && !p.zombie) out.push(p);
  }
  return out;
}

const seen = (p: ProcInfo) => ({ hostPid: p.hostPid, startTicks: p.startTicks, pidNamespace: p.pidNamespace });
const scope = { uid: UID };
let trees: ProcInfo[][] = [];

beforeAll(async () => {
  await namespaceTree("sleep 600");
  await namespaceTree("sleep 600");
  // A third tree whose sleep runs in a pid namespace nested in its own (an unprivileged one, made as UID).
  await namespaceTree("unshare --user --map-root-user --pid --fork --mount-proc bash -c 'echo READY; exec sleep 600'", true);
  const all = await procsOfUid();
  const byNs = new Map<number, ProcInfo[]>();
  for (const p of all) byNs.set(p.pidNamespace, [...(byNs.get(p.pidNamespace) ?? []), p]);
  trees = [...byNs.values()];
});

afterAll(() => {
  for (const c of children) c.kill("SIGKILL");
  return new Promise<void>((resolve) => {
    const kill = spawn("pkill", ["-KILL", "-U", String(UID)]);
    kill.once("exit", () => resolve());
  });
});

describe("findProcesses", () => {
  it("finds a pid in the one namespace named, and counts every namespace it is in otherwise", async () => {
    // Pid 2 is the sleep of each of the first two trees (bash is 1), and of no other process of UID.
    const both = await findProcesses(scope, 2);
    expect(both.length).toBeGreaterThanOrEqual(2);
    const [a] = trees.filter((t) => t.some((p) => p.nsPid === 2));
    const sleepA = a?.find((p) => p.nsPid === 2) as ProcInfo;
    expect(await findProcesses(scope, 2, sleepA.pidNamespace)).toEqual([seen(sleepA)]);
  });

  it("sees nothing outside the scope: another uid's processes, or a process group not the session's", async () => {
    expect(await findProcesses({ uid: UID + 1 }, 2)).toEqual([]);
    expect(await findProcesses({ groups: [] }, 1)).toEqual([]);
    // The runner's own process is found only when its group is in scope.
    const self = await readProc(process.pid);
    expect(self).toBeDefined();
    const found = await findProcesses({ groups: [self?.pgid ?? -1] }, self?.nsPid ?? -1);
    expect(found.map((s) => s.hostPid)).toContain(process.pid);
  });
});

describe("stillAlive", () => {
  it("is the same process only with the same start time and namespace, and not once it exited", async () => {
    const tree = await namespaceTree("sleep 600");
    const mine = (await procsOfUid()).find((p) => p.nsPid === 2 && !trees.flat().some((q) => q.hostPid === p.hostPid)) as ProcInfo;
    expect(mine).toBeDefined();
    expect(await stillAlive(scope, seen(mine))).toBe(true);
    // A pid reused by a later process has another start time: not the one that declared.
    expect(await stillAlive(scope, { ...seen(mine), startTicks: mine.startTicks + 1 })).toBe(false);
    expect(await stillAlive(scope, { ...seen(mine), pidNamespace: mine.pidNamespace + 1 })).toBe(false);
    expect(await stillAlive({ uid: UID + 1 }, seen(mine))).toBe(false);
    process.kill(mine.hostPid, "SIGKILL");
    await new Promise((resolve) => tree.once("exit", resolve));
    expect(await stillAlive(scope, seen(mine))).toBe(false);
  });
});

describe("resolveAncestor", () => {
  it("finds the nearest declared ancestor in the start's namespace, the start itself first", async () => {
    const tree = trees.find((t) => t.some((p) => p.nsPid === 2)) as ProcInfo[];
    const bash = tree.find((p) => p.nsPid === 1) as ProcInfo;
    const sleep = tree.find((p) => p.nsPid === 2) as ProcInfo;
    const other = trees.find((t) => t !== tree && t.some((p) => p.nsPid === 1))?.find((p) => p.nsPid === 1) as ProcInfo;
    expect(await resolveAncestor(scope, seen(sleep), [seen(other), seen(bash)])).toBe(1);
    expect(await resolveAncestor(scope, seen(sleep), [seen(sleep), seen(bash)])).toBe(0);
    // Another namespace's declared process is never an ancestor.
    expect(await resolveAncestor(scope, seen(sleep), [seen(other)])).toBeUndefined();
  });

  it("stops at the namespace's edge: a nested namespace's process never reaches its parent's declared one", async () => {
    const nested = trees.find((t) => t.length === 1 && t[0]?.nsPid === 1)?.[0] as ProcInfo;
    expect(nested).toBeDefined();
    const outer = (await readProc(nested.ppid)) as ProcInfo;
    // The parent (the unshare that made the nested namespace) is the session's, one namespace up.
    expect(outer.uid).toBe(UID);
    expect(outer.pidNamespace).not.toBe(nested.pidNamespace);
    const outerBash = (await readProc(outer.ppid)) as ProcInfo;
    expect(await resolveAncestor(scope, seen(nested), [seen(outer), seen(outerBash)])).toBeUndefined();
    // From the outer namespace the same declared processes are found.
    expect(await resolveAncestor(scope, seen(outer), [seen(outerBash)])).toBe(0);
  });
});
