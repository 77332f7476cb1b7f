/**
 * Per-session cgroups with memory, cpu and pids limits, where the host lets
 * the runner make them (cgroup-probe.ts). Each is keyed by an opaque string
 * (a session id, or a pooled sandbox's key before any session has it).
 *
 * cgroup v2, a directory D delegated to the runner:
 *
 *   D/runner           the runner's own processes (cgroup v2 lets a directory
 *                      hand controllers to children only when it holds no
 *                      process itself)
 *   D/session-<key>    one per session: memory.max, cpu.max, pids.max
 *
 * cgroup v1, in each hierarchy holding memory, pids or cpu (cpuacct too), at
 * the runner's own directory R there (v1 lets a directory hold processes and
 * children both, so the runner stays where it is):
 *
 *   R/paddock-<instance>/s-<key>    memory.limit_in_bytes (and
 *                                   memory.memsw.limit_in_bytes where swap is
 *                                   accounted), pids.max, cpu.cfs_quota_us
 *
 * The sandbox's first process writes itself into every one of its session's
 * directories before exec'ing the rest of the chain (launch.ts `cgroupDirs`),
 * so every process of the session starts inside them. A memory hog meets the
 * kernel's OOM killer inside its own cgroup; a fork bomb meets pids.max.
 *
 * Where neither is offered, sessions get the rlimits only: processes per uid,
 * open files, file size; memory and CPU are then not bounded per session.
 */
import { readFileSync } from "node:fs";
import { mkdir, readdir, readFile, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CgroupKind, type CgroupCapability, type CgroupHierarchy } from "./cgroup-probe.ts";

export interface CgroupLimits {
  memoryMaxBytes: number;
  /** CPU time per period, in microseconds of a 100 ms period (100_000 = one core). */
  cpuMaxMicros: number;
  pidsMax: number;
}

export interface SessionCgroups {
  /** v2: moves the runner into D/runner and enables memory, cpu and pids for D's children. v1: sweeps what a previous runner process of the same instance left. */
  start(): Promise<void>;
  /** Makes key's directories with their limits; answers them, every one for the sandbox's first process to join (launch.ts `cgroupDirs`). */
  create(key: string, limits: CgroupLimits): Promise<string[]>;
  /** Removes key's directories once its processes are gone (v1: SIGKILLs any left, then removes). */
  remove(key: string): Promise<void>;
  /** v1: removes the runner's `paddock-<instance>` directories once they are empty (they sit in cgroups that are not the runner's to leave things in). */
  stop(): Promise<void>;
  /** The CPU time key's processes used so far, exited ones included (usage.ts); undefined where not accounted (v1 without cpuacct). */
  cpuNanos(key: string): number | undefined;
}

const CPU_PERIOD_MICROS = 100_000;

/**
 * D/runner's cpu.weight (v2; the maximum, sessions keep the default 100).
 * Siblings share CPU by weight when it is short, so at equal weights a
 * runner among 20 busy sessions would get a 21st of it, and every session's
 * terminal output, keystrokes and checkpoints would wait on it. Weights only
 * divide what is contended (the runner takes no more than it uses), and each
 * session stays capped by its cpu.max. (v1 needs nothing: the runner's
 * threads compete one by one against all sessions' group together.)
 */
export const RUNNER_CPU_WEIGHT = 10_000;
/** How long a removal waits for a cgroup's SIGKILLed processes to go (they are not the runner's children: polled). */
const EMPTY_SETTLE_MS = 5_000;
const EMPTY_POLL_MS = 10;

const safeKey = (key: string) => key.replace(/[^A-Za-z0-9_-]/g, "_");

/** Whether the host offers session cgroups (a delegated v2 directory, or v1 hierarchies): createSessionCgroups makes some. */
export function offersCgroups(cap: CgroupCapability): boolean {
  return cap.kind === CgroupKind.v1 || (cap.kind === CgroupKind.v2 && cap.hierarchies.length > 0);
}

/** The session cgroups of cap's kind; undefined where the host offers none. */
export function createSessionCgroups(cap: CgroupCapability, opts: { instance: string; runnerPid: number }): SessionCgroups | undefined {
  if (!offersCgroups(cap)) return undefined;
  const [delegated] = cap.hierarchies;
  return cap.kind === CgroupKind.v2 && delegated ? v2Cgroups(delegated.dir, opts.runnerPid) : v1Cgroups(cap.hierarchies, opts.instance);
}

function v2Cgroups(delegatedDir: string, runnerPid: number): SessionCgroups {
  const sessionDir = (key: string) => join(delegatedDir, `session-${safeKey(key)}`);
  return {
    async start() {
      const own = join(delegatedDir, "runner");
      await mkdir(own, { recursive: true });
      await writeFile(join(own, "cgroup.procs"), String(runnerPid));
      await writeFile(join(delegatedDir, "cgroup.subtree_control"), "+memory +cpu +pids");
      await writeFile(join(own, "cpu.weight"), String(RUNNER_CPU_WEIGHT));
    },
    async create(key, limits) {
      const dir = sessionDir(key);
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, "memory.max"), String(limits.memoryMaxBytes));
      // No swap beyond the memory limit: a hog is stopped, not paged out at everyone's cost.
      await writeFile(join(dir, "memory.swap.max"), "0").catch(() => undefined);
      await writeFile(join(dir, "cpu.max"), `${limits.cpuMaxMicros} ${CPU_PERIOD_MICROS}`);
      await writeFile(join(dir, "pids.max"), String(limits.pidsMax));
      return [dir];
    },
    async remove(key) {
      await rmdir(sessionDir(key)).catch(ignoreMissing);
    },
    stop: () => Promise.resolve(),
    cpuNanos(key) {
      const usec = /^usage_usec (\d+)$/m.exec(readOrEmpty(join(sessionDir(key), "cpu.stat")))?.[1];
      return usec === undefined ? undefined : Number(usec) * 1_000;
    },
  };
}

function v1Cgroups(hierarchies: readonly CgroupHierarchy[], instance: string): SessionCgroups {
  const bases = hierarchies.map((h) => ({ base: join(h.dir, `paddock-${instance}`), controllers: h.controllers }));
  const leaf = (key: string) => `s-${safeKey(key)}`;
  const cpuacct = bases.find((h) => h.controllers.includes("cpuacct"));
  return {
    async start() {
      for (const { base } of bases) {
        await mkdir(base, { recursive: true });
        // The previous runner process's sessions (and pooled sandboxes): none of them is held now.
        for (const name of await readdir(base)) if (name.startsWith("s-")) await removeEmptied(join(base, name));
      }
    },
    async create(key, limits) {
      // The hierarchies at once: each is a few small writes on a session's way to running.
      const dirs = bases.map(({ base }) => join(base, leaf(key)));
      const made = async (dir: string, controllers: readonly string[]) => {
        await mkdir(dir, { recursive: true });
        await writeV1Limits(dir, controllers, limits);
      };
      try {
        await Promise.all(bases.map(({ controllers }, i) => made(dirs[i] ?? "", controllers)));
        return dirs;
      } catch (err) {
        await Promise.all(dirs.map((d) => rmdir(d).catch(() => undefined)));
        throw err;
      }
    },
    async remove(key) {
      await Promise.all(bases.map(({ base }) => removeEmptied(join(base, leaf(key)))));
    },
    async stop() {
      // A session still held keeps its base: it is swept at the next start.
      for (const { base } of bases) await rmdir(base).catch(() => undefined);
    },
    cpuNanos(key) {
      const text = cpuacct ? readOrEmpty(join(cpuacct.base, leaf(key), "cpuacct.usage")).trim() : "";
      return /^\d+$/.test(text) ? Number(text) : undefined;
    },
  };
}

async function writeV1Limits(dir: string, controllers: readonly string[], limits: CgroupLimits): Promise<void> {
  if (controllers.includes("memory")) {
    // memsw (memory + swap) may never be below the memory limit: lifted first, then set to it, so swap
    // does not let a hog past the limit. Absent where the kernel does not account swap.
    const memsw = join(dir, "memory.memsw.limit_in_bytes");
    const swapAccounted = await writeFile(memsw, "-1").then(() => true, ignoreMissingAs(false));
    await writeFile(join(dir, "memory.limit_in_bytes"), String(limits.memoryMaxBytes));
    if (swapAccounted) await writeFile(memsw, String(limits.memoryMaxBytes));
  }
  if (controllers.includes("pids")) await writeFile(join(dir, "pids.max"), String(limits.pidsMax));
  if (controllers.includes("cpu")) {
    await writeFile(join(dir, "cpu.cfs_period_us"), String(CPU_PERIOD_MICROS));
    // v1 refuses a quota above the runner's own cgroup's (EINVAL): the session is then held to that one, as its child.
    await writeFile(join(dir, "cpu.cfs_quota_us"), String(limits.cpuMaxMicros)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== "EINVAL") throw err;
    });
  }
}

/** Removes a v1 cgroup; processes still in it are SIGKILLed first and waited for. Missing is fine. */
async function removeEmptied(dir: string): Promise<void> {
  const deadline = Date.now() + EMPTY_SETTLE_MS;
  for (;;) {
    const removed = await rmdir(dir).then(
      () => true,
      (err: NodeJS.ErrnoException) => {
        if (err.code === "ENOENT") return true;
        if (err.code !== "EBUSY" || Date.now() > deadline) throw err;
        return false;
      },
    );
    if (removed) return;
    for (const pid of await procsOf(dir)) killQuietly(pid);
    await new Promise((resolve) => setTimeout(resolve, EMPTY_POLL_MS));
  }
}

async function procsOf(dir: string): Promise<number[]> {
  const text = await readFile(join(dir, "cgroup.procs"), "utf8").catch(() => "");
  return text.split("\n").filter(Boolean).map(Number);
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // exited meanwhile
  }
}

/** Read at a generation's start and end only: a small synchronous read of a kernel file. */
function readOrEmpty(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "";
  }
}

function ignoreMissing(err: NodeJS.ErrnoException): void {
  if (err.code !== "ENOENT") throw err;
}

function ignoreMissingAs<T>(value: T): (err: NodeJS.ErrnoException) => T {
  return (err) => {
    if (err.code !== "ENOENT") throw err;
    return value;
  };
}
