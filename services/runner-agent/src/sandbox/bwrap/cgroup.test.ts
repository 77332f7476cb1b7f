/**
 * Per-session cgroups (issue #23 item 4): the probe over mountinfo and
 * /proc/self/cgroup texts, then, where this host offers cgroups (a delegated
 * v2 subtree or writable v1 hierarchies; these VMs mount v1 writable), real
 * sandboxes held to them: a memory hog meets the OOM killer at its session's
 * limit, a fork bomb stops at pids.max, a spinner's CPU quota is written,
 * and another session keeps working meanwhile.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSessionCgroups, RUNNER_CPU_WEIGHT, type CgroupLimits, type SessionCgroups } from "./cgroup.ts";
import { CgroupKind, probeCgroup, type CgroupFs } from "./cgroup-probe.ts";
import type { SandboxSpec } from "./launch.ts";
import { probeBwrap, type BwrapCapability } from "./probe.ts";
import { runInSandbox, startTestSandboxes, testHostIds, TEST_PATH, type TestSandboxes, type TestSession } from "./test-sandbox.ts";
import { createUidAllocator, pidsOfUid } from "./uid-allocator.ts";

/** This host's cgroups as the runner would find them. */
const HOST = probeCgroup();
const V1 = HOST.kind === CgroupKind.v1;
const MiB = 1024 * 1024;

/** A file system where `files` exist (with their text) and `writable` directories may be written. */
function fakeFs(files: Record<string, string>, writable: string[]): CgroupFs {
  return { read: (f) => files[f], writable: (d) => writable.includes(d) };
}

// This VM's layout: cgroup2 mounted beside the v1 hierarchies but holding none of their controllers.
const HYBRID_MOUNTINFO = [
  "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
  "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu",
  "32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct",
  "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory",
  "38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids",
  "39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd",
  "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
].join("\n");
const HYBRID_OWN = ["9:name=systemd:/", "8:pids:/", "4:memory:/process_api/abc", "2:cpuacct:/", "1:cpu:/", "0::/"].join("\n");
const HYBRID_DIRS = ["/sys/fs/cgroup/memory/process_api/abc", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct"];
/** Each directory a cgroup: it lists its processes. */
const procsOf = (dirs: string[]) => Object.fromEntries(dirs.map((d) => [`${d}/cgroup.procs`, "1\n"]));
const HYBRID_FILES = { "/sys/fs/cgroup/unified/cgroup.controllers": "hugetlb\n", ...procsOf(HYBRID_DIRS) };

describe("probeCgroup", () => {
  it("prefers a delegated cgroup v2 directory offering memory, cpu and pids", () => {
    const mountinfo = "35 25 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
    const dir = "/sys/fs/cgroup/system.slice/paddock.service";
    const cap = probeCgroup(mountinfo, "0::/system.slice/paddock.service\n", fakeFs({ [`${dir}/cgroup.controllers`]: "cpuset cpu io memory pids\n" }, [dir]));
    expect(cap).toEqual({ kind: "v2", hierarchies: [{ dir, controllers: ["memory", "pids", "cpu"] }], reason: undefined });
    const readOnly = probeCgroup(mountinfo, "0::/system.slice/paddock.service\n", fakeFs({ [`${dir}/cgroup.controllers`]: "cpu memory pids" }, []));
    expect(readOnly).toMatchObject({ kind: "none", hierarchies: [] });
    expect(readOnly.reason).toContain("cgroup v2: the runner's cgroup is not writable by it");
  });

  it("falls back to writable v1 hierarchies at the runner's own directory in each, and says why not v2", () => {
    const cap = probeCgroup(HYBRID_MOUNTINFO, HYBRID_OWN, fakeFs(HYBRID_FILES, HYBRID_DIRS));
    expect(cap.kind).toBe("v1");
    expect(cap.hierarchies).toEqual([
      { dir: "/sys/fs/cgroup/memory/process_api/abc", controllers: ["memory"] },
      { dir: "/sys/fs/cgroup/pids", controllers: ["pids"] },
      { dir: "/sys/fs/cgroup/cpu", controllers: ["cpu"] },
      { dir: "/sys/fs/cgroup/cpuacct", controllers: ["cpuacct"] },
    ]);
    expect(cap.reason).toBe("cgroup v2: controllers not available to the runner: memory, pids, cpu");
  });

  it("takes co-mounted controllers as one hierarchy, and a container's mount of its own subtree at its root", () => {
    const mountinfo = [
      "41 30 0:40 /docker/c1 /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct",
      "42 30 0:41 /docker/c1 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
      "43 30 0:42 /docker/c1 /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids",
    ].join("\n");
    const own = ["7:pids:/docker/c1", "5:memory:/docker/c1/inner", "3:cpu,cpuacct:/docker/c1"].join("\n");
    const dirs = ["/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/memory/inner", "/sys/fs/cgroup/pids"];
    const files = procsOf(dirs);
    const cap = probeCgroup(mountinfo, own, fakeFs(files, dirs));
    expect(cap.kind).toBe("v1");
    expect(cap.hierarchies).toEqual([
      { dir: "/sys/fs/cgroup/memory/inner", controllers: ["memory"] },
      { dir: "/sys/fs/cgroup/pids", controllers: ["pids"] },
      { dir: "/sys/fs/cgroup/cpu,cpuacct", controllers: ["cpu", "cpuacct"] },
    ]);
    // The runner's cgroup outside what the mount shows (another subtree, above a cgroup namespace's root): not usable.
    const outside = probeCgroup(mountinfo, own.replace("5:memory:/docker/c1/inner", "5:memory:/docker/c2"), fakeFs(files, []));
    expect(outside.kind).toBe("none");
    expect(outside.reason).toContain("memory not mounted");
    expect(probeCgroup(mountinfo, own.replace("/docker/c1/inner", "/docker/c1/../.."), fakeFs(files, [])).reason).toContain("memory not mounted");
  });

  it("says none, and why, where v1 is read-only or lacks a controller, or nothing is mounted", () => {
    const readOnly = probeCgroup(HYBRID_MOUNTINFO, HYBRID_OWN, fakeFs(HYBRID_FILES, []));
    expect(readOnly).toMatchObject({ kind: "none", hierarchies: [] });
    expect(readOnly.reason).toContain("cgroup v1: memory not writable, pids not writable, cpu not writable");
    const noPids = probeCgroup(HYBRID_MOUNTINFO.replace(/^.*pids.*$/m, ""), HYBRID_OWN, fakeFs(HYBRID_FILES, HYBRID_DIRS));
    expect(noPids.reason).toContain("cgroup v1: pids not mounted");
    const gone = probeCgroup(HYBRID_MOUNTINFO, HYBRID_OWN, fakeFs({}, HYBRID_DIRS));
    expect(gone.reason).toContain("cgroup v1: memory not found, pids not found, cpu not found");
    // cpuacct only serves usage: its absence does not matter.
    expect(probeCgroup(HYBRID_MOUNTINFO.replace(/^.*cpuacct.*$/m, ""), HYBRID_OWN, fakeFs(HYBRID_FILES, HYBRID_DIRS)).kind).toBe("v1");
    expect(probeCgroup("", "", fakeFs({}, []))).toEqual({ kind: "none", hierarchies: [], reason: "cgroup v2: no cgroup v2 hierarchy mounted; cgroup v1: memory not mounted, pids not mounted, cpu not mounted" });
  });

  it("on a delegated v2 directory, moves the runner into runner/ above every session's weight and hands the controllers down", async () => {
    // What start() writes, into a plain directory standing in for the delegated one (these VMs mount v1).
    const dir = mkdtempSync(join(tmpdir(), "paddock-cgroup-v2-"));
    try {
      const v2 = createSessionCgroups({ kind: CgroupKind.v2, hierarchies: [{ dir, controllers: ["memory", "pids", "cpu"] }], reason: undefined }, { instance: "i", runnerPid: 4242 });
      await v2?.start();
      expect(readFileSync(join(dir, "runner", "cgroup.procs"), "utf8")).toBe("4242");
      expect(readFileSync(join(dir, "cgroup.subtree_control"), "utf8")).toBe("+memory +cpu +pids");
      expect(readFileSync(join(dir, "runner", "cpu.weight"), "utf8")).toBe(String(RUNNER_CPU_WEIGHT));
      await v2?.create("s1", LIMITS);
      expect(readFileSync(join(dir, "session-s1", "cpu.max"), "utf8")).toBe("100000 100000");
      expect(existsSync(join(dir, "session-s1", "cpu.weight"))).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.runIf(HOST.kind !== CgroupKind.none)("on this host, finds the directories this process is in, covering memory, pids and cpu", () => {
    for (const h of HOST.hierarchies) expect(readFileSync(join(h.dir, "cgroup.procs"), "utf8").split("\n")).toContain(String(process.pid));
    expect(HOST.hierarchies.flatMap((h) => h.controllers)).toEqual(expect.arrayContaining(["memory", "pids", "cpu"]));
  });
});

let cap: BwrapCapability;
let boxes: TestSandboxes;
let dataDir: string;
let a: TestSession;
let b: TestSession;
let groups: SessionCgroups;
const instance = testHostIds().instance;
const LIMITS: CgroupLimits = { memoryMaxBytes: 256 * MiB, cpuMaxMicros: 100_000, pidsMax: 64 };

describe.runIf(HOST.kind !== CgroupKind.none)(`sessions in cgroups of their own on this host (${HOST.kind})`, () => {
  beforeAll(async () => {
    const { firstUid } = testHostIds();
    cap = await probeBwrap({ uid: firstUid + 15, gid: firstUid + 15, path: TEST_PATH });
    dataDir = mkdtempSync("/var/lib/paddock-cgroup-test-");
    boxes = await startTestSandboxes(cap, createUidAllocator({ first: firstUid, count: 15, reserved: [0] }), dataDir);
    [a, b] = [await boxes.session("a"), await boxes.session("b")];
    const made = createSessionCgroups(HOST, { instance, runnerPid: process.pid });
    if (!made) throw new Error("no session cgroups on a host that offers them");
    groups = made;
    await groups.start();
  });

  afterAll(async () => {
    for (const key of ["spin", "hog", "b", "bomb", "left"]) await groups?.remove(key);
    await groups?.stop();
    await boxes?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("starts a session's every process in each of its cgroups, with memory, pids and cpu limits written; removes them after", async () => {
    const dirs = await groups.create("spin", { memoryMaxBytes: 96 * MiB, cpuMaxMicros: 50_000, pidsMax: 40 });
    expect(dirs).toHaveLength(HOST.hierarchies.length);
    const spinner = await startUntil(a.spec(["sh", "-c", "echo spinning; while :; do :; done"], { cgroupDirs: dirs }), "spinning");
    const pids = pidsOfUid(a.ids.uid, { live: true });
    expect(pids.length).toBeGreaterThan(1);
    for (const d of dirs) expect(readFileSync(join(d, "cgroup.procs"), "utf8").split("\n")).toEqual(expect.arrayContaining(pids.map(String)));
    if (V1) {
      expect(read(dirs, "cpu.cfs_quota_us")).toBe("50000");
      expect(read(dirs, "cpu.cfs_period_us")).toBe("100000");
      expect(read(dirs, "memory.limit_in_bytes")).toBe(String(96 * MiB));
      // Swap accounted here or not: where it is, memory + swap is held to the same limit.
      const memsw = dirs.map((d) => join(d, "memory.memsw.limit_in_bytes")).find(existsSync);
      if (memsw) expect(readFileSync(memsw, "utf8").trim()).toBe(String(96 * MiB));
    } else {
      expect(read(dirs, "cpu.max")).toBe("50000 100000");
      expect(read(dirs, "memory.max")).toBe(String(96 * MiB));
    }
    expect(read(dirs, "pids.max")).toBe("40");
    expect(spinner.proc.signal("SIGKILL")).toBeGreaterThan(0);
    await spinner.done;
    // What the session used, its exited processes included (usage.ts): counted where cpuacct (v1) or cpu.stat (v2) is there.
    if (!V1 || HOST.hierarchies.some((h) => h.controllers.includes("cpuacct"))) expect(groups.cpuNanos("spin")).toBeGreaterThan(0);
    await groups.remove("spin");
    expect(groups.cpuNanos("spin")).toBeUndefined();
    for (const d of dirs) expect(existsSync(d)).toBe(false);
  });

  it("kills a memory hog by the OOM killer at its session's limit; the host and another session keep working", async () => {
    const bDirs = await groups.create("b", LIMITS);
    const other = await startUntil(b.spec(["sh", "-c", "echo b-ready; read line; echo b-got-$line"], { cgroupDirs: bDirs }), "b-ready");
    const dirs = await groups.create("hog", { ...LIMITS, memoryMaxBytes: 64 * MiB });
    // 256 MiB in one string: four times the session's limit, nothing on this host besides.
    const hog = await runInSandbox(a.spec(["sh", "-c", `perl -e '$x = "a" x (256 * 1024 * 1024); print "survived\\n"'; echo hog-status=$?.`], { cgroupDirs: dirs }), cap).done;
    expect(hog.out).not.toContain("survived");
    expect(hog.out).toContain("hog-status=137."); // SIGKILL
    const oomFile = V1 ? "memory.oom_control" : "memory.events";
    expect(counter(read(dirs, oomFile), "oom_kill")).toBeGreaterThanOrEqual(1);
    if (V1) expect(Number(read(dirs, "memory.max_usage_in_bytes"))).toBeLessThanOrEqual(64 * MiB);
    // The other session: its process lived through it and answers; nothing of its own was killed.
    other.proc.write("still-here\n");
    expect((await other.done).out).toContain("b-got-still-here");
    expect(counter(read(bDirs, oomFile), "oom_kill")).toBe(0);
    expect(await hostRuns("true")).toBe(0);
    await groups.remove("hog");
    await groups.remove("b");
  });

  it("stops a fork bomb at pids.max (below its RLIMIT_NPROC); another session still starts a process", async () => {
    const PIDS_MAX = 24;
    const dirs = await groups.create("bomb", { ...LIMITS, pidsMax: PIDS_MAX });
    // The spec's RLIMIT_NPROC is 64: only pids.max stops it below that.
    expect(a.spec(["true"]).rlimits.processes).toBe(64);
    const bomb = await startUntil(a.spec(["sh", "-c", "(i=0; while true; do sleep 1000 & i=$((i+1)); echo $i > /tmp/forked; done); echo full; exec sleep 1000"], { cgroupDirs: dirs }), "full");
    const forked = Number(readFileSync(join(a.dir, "tmp", "forked"), "utf8"));
    expect(forked).toBeGreaterThan(10);
    expect(forked).toBeLessThan(PIDS_MAX);
    expect(counter(read(dirs, "pids.events"), "max")).toBeGreaterThanOrEqual(1);
    expect(pidsOfUid(a.ids.uid, { live: true }).length).toBeLessThanOrEqual(PIDS_MAX);
    const other = await runInSandbox(b.spec(["sh", "-c", "echo b-started"]), cap).done;
    expect(other.out).toBe("b-started\n");
    expect(bomb.proc.signal("SIGKILL")).toBeGreaterThan(0);
    await bomb.done;
    await groups.remove("bomb");
  });

  // v1 only: a v2 runner keeps its sessions in its delegated directory as it always has.
  it.runIf(V1)("at start, sweeps what a previous runner process of its instance left (killing what still runs there), nothing of another instance's", async () => {
    const dirs = await groups.create("left", LIMITS);
    const left = await startUntil(a.spec(["sh", "-c", "echo up; exec sleep 1000"], { cgroupDirs: dirs }), "up");
    const otherInstance = createSessionCgroups(HOST, { instance: `${instance}x`, runnerPid: process.pid });
    const kept = (await otherInstance?.create("left", LIMITS)) ?? [];
    // A new runner process of the same instance.
    await createSessionCgroups(HOST, { instance, runnerPid: process.pid })?.start();
    for (const d of dirs) expect(existsSync(d)).toBe(false);
    expect((await left.done).signal).toBe("SIGKILL");
    expect(pidsOfUid(a.ids.uid, { live: true })).toEqual([]);
    for (const d of kept) expect(existsSync(d)).toBe(true);
    await otherInstance?.remove("left");
    await otherInstance?.stop();
    for (const h of HOST.hierarchies) expect(existsSync(join(h.dir, `paddock-${instance}x`))).toBe(false);
  });
});

/** The value of the file `name` in whichever of a session's directories has it. */
function read(dirs: readonly string[], name: string): string {
  const file = dirs.map((d) => join(d, name)).find(existsSync);
  if (!file) throw new Error(`no ${name} in ${dirs.join(", ")}`);
  return readFileSync(file, "utf8").trim();
}

/** The number after key in a flat-keyed cgroup file (`oom_kill 1`, `max 3`). */
function counter(text: string, key: string): number {
  return Number(new RegExp(`^${key} (\\d+)$`, "m").exec(text)?.[1] ?? Number.NaN);
}

/** Starts spec in its sandbox; resolves once it printed text (rejects if it exited first). */
async function startUntil(spec: SandboxSpec, text: string): Promise<ReturnType<typeof runInSandbox>> {
  let seen!: () => void;
  const printed = new Promise<void>((resolve) => (seen = resolve));
  const run = runInSandbox(spec, cap, (out) => {
    if (out.includes(text)) seen();
  });
  await Promise.race([printed, run.done.then((r) => Promise.reject(new Error(`exited before printing ${text}: ${r.out}`)))]);
  return run;
}

function hostRuns(command: string): Promise<number | null> {
  return new Promise((resolve) => spawn(command, { stdio: "ignore" }).once("exit", resolve));
}
