import { readFileSync } from "node:fs";

/** CPU seconds (user + system) a process has used so far, from /proc (clock ticks at 100 Hz). */
export function cpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

/** CPU seconds per named process over a phase, and the wall seconds it took. */
export interface CpuReport {
  wall: number;
  seconds: Record<string, number>;
  text: string;
}

/**
 * Where the CPU went during a phase, per named process (the bench's own
 * process included, as "bench"): on two shared cores this says which side is the limit.
 */
export function cpuMeter(pids: Record<string, number | undefined>): () => CpuReport {
  const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuSeconds(pid)]));
  const selfBefore = process.cpuUsage();
  const start = performance.now();
  return () => {
    const wall = (performance.now() - start) / 1000;
    const self = process.cpuUsage(selfBefore);
    const seconds: Record<string, number> = {};
    for (const [name, pid] of Object.entries(pids)) seconds[name] = cpuSeconds(pid) - (before[name] ?? 0);
    seconds.bench = (self.user + self.system) / 1e6;
    const parts = Object.entries(seconds).map(([name, s]) => `${name} ${s.toFixed(1)}`);
    return { wall, seconds, text: `cpu s over ${wall.toFixed(1)} s wall: ${parts.join(", ")}` };
  };
}

/**
 * The environment that makes a service write a V8 CPU profile of its whole
 * life (bench/src/cpu-profile.mjs) into PADDOCK_BENCH_PROFILE_DIR, when the
 * bench runs with it set; empty otherwise. Given to the services a bench
 * wants profiled.
 */
export function profiledServiceEnv(): Record<string, string> {
  const profileDir = process.env.PADDOCK_BENCH_PROFILE_DIR;
  if (!profileDir) return {};
  return { NODE_OPTIONS: `--import ${new URL("./cpu-profile.mjs", import.meta.url).pathname}`, PADDOCK_BENCH_PROFILE_DIR: profileDir };
}
