/**
 * What a bwrap session may use (issue #23 item 4), from the runner config:
 * rlimits always (launch.ts), memory, cpu and pids limits where the host
 * offers cgroups: a delegated v2 subtree or writable v1 hierarchies (cgroup.ts). The runner reports which it enforces as
 * the capabilities `limits:rlimit` and `limits:cgroup`.
 */
import type { CgroupLimits } from "./cgroup.ts";
import type { SandboxRlimits } from "./launch.ts";

export interface SandboxLimits {
  rlimits: SandboxRlimits;
  cgroup: CgroupLimits;
}

/** The config's defaults (RLIMIT_NPROC counts threads too: node and a compiler need some hundreds). */
export const DEFAULT_SANDBOX_LIMITS: SandboxLimits = {
  rlimits: { processes: 4_096, openFiles: 4_096, fileSizeBytes: 8 * 1024 ** 3 },
  cgroup: { memoryMaxBytes: 4 * 1024 ** 3, cpuMaxMicros: 200_000, pidsMax: 4_096 },
};

/** The kinds of per-session limit a runner enforces, each reported as the capability `limits:<kind>`. */
export const LimitKind = { rlimit: "rlimit", cgroup: "cgroup" } as const;
export type LimitKind = (typeof LimitKind)[keyof typeof LimitKind];
