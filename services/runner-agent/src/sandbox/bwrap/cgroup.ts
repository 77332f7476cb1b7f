/**
 * cgroup v2 limits for sessions, where the host delegates memory, cpu and
 * pids to the runner (probe.ts: `cgroup.delegated`; a systemd unit with
 * `Delegate=yes`, for one). The runner's delegated directory D is laid out as
 *
 *   D/runner           the runner's own processes (cgroup v2 lets a directory
 *                      hand controllers to children only when it holds no
 *                      process itself)
 *   D/session-<id>     one per session: memory.max, cpu.max, pids.max
 *
 * The sandbox's first process writes itself into its session's cgroup.procs
 * before exec'ing the rest of the chain (launch.ts `cgroupDir`), so every
 * process of the session starts inside it.
 *
 * Where nothing is delegated (this project's CI machines), sessions get the
 * rlimits only: processes per uid, open files, file size; memory and CPU are
 * then not bounded per session.
 */
import { mkdir, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";

export interface CgroupLimits {
  memoryMaxBytes: number;
  /** CPU time per period, in microseconds of a 100 ms period (100_000 = one core). */
  cpuMaxMicros: number;
  pidsMax: number;
}

export interface SessionCgroups {
  /** Moves the runner into D/runner and enables memory, cpu and pids for D's children. */
  start(): Promise<void>;
  /** Makes the session's directory with its limits; answers it (launch.ts `cgroupDir`). */
  create(sessionId: string, limits: CgroupLimits): Promise<string>;
  /** Removes the session's directory (its processes must be gone). */
  remove(sessionId: string): Promise<void>;
}

const CPU_PERIOD_MICROS = 100_000;

export function createSessionCgroups(delegatedDir: string, runnerPid: number): SessionCgroups {
  const sessionDir = (id: string) => join(delegatedDir, `session-${id.replace(/[^A-Za-z0-9_-]/g, "_")}`);
  return {
    async start() {
      const own = join(delegatedDir, "runner");
      await mkdir(own, { recursive: true });
      await writeFile(join(own, "cgroup.procs"), String(runnerPid));
      await writeFile(join(delegatedDir, "cgroup.subtree_control"), "+memory +cpu +pids");
    },
    async create(sessionId, limits) {
      const dir = sessionDir(sessionId);
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, "memory.max"), String(limits.memoryMaxBytes));
      // No swap beyond the memory limit: a hog is stopped, not paged out at everyone's cost.
      await writeFile(join(dir, "memory.swap.max"), "0").catch(() => undefined);
      await writeFile(join(dir, "cpu.max"), `${limits.cpuMaxMicros} ${CPU_PERIOD_MICROS}`);
      await writeFile(join(dir, "pids.max"), String(limits.pidsMax));
      return dir;
    },
    async remove(sessionId) {
      await rmdir(sessionDir(sessionId)).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== "ENOENT") throw err;
      });
    },
  };
}
