/**
 * The composition root's choice of sandbox backend (PADDOCK_SANDBOX), made
 * once at start: `process`, `bwrap` (refused with the probe's reason where it
 * does not work), or `auto` (bwrap when its probe succeeds). The process
 * backend isolates nothing, and the runner says so loudly.
 */
import { mkdirSync } from "node:fs";
import type { Logger } from "@paddock/logging";
import type { RunnerConfig } from "./config.ts";
import { SandboxKind, type SandboxBackend, type SandboxImages } from "./sandbox/backend.ts";
import { createBwrapBackend } from "./sandbox/bwrap/backend.ts";
import { DEFAULT_SANDBOX_LIMITS } from "./sandbox/bwrap/limits.ts";
import { probeBwrap, type BwrapCapability } from "./sandbox/bwrap/probe.ts";
import { claimUid, DEFAULT_UID_CLAIM_DIR, releaseUid } from "./sandbox/bwrap/uid-allocator.ts";
import { createProcessBackend } from "./sandbox/process/backend.ts";
import { RunnerError, RunnerErrorCode } from "./errors.ts";

export type SandboxSettings = RunnerConfig["sandbox"];

/** A runner configured without sandbox settings (tests' agents): the process backend. */
export const PROCESS_SANDBOX: SandboxSettings = { backend: "process", uidFirst: 200_000, uidCount: 1_024, netInstance: undefined, netPrefix: undefined, limits: DEFAULT_SANDBOX_LIMITS };

export class SandboxUnavailableError extends RunnerError {
  constructor(message: string) {
    super(RunnerErrorCode.sandboxUnavailable, message);
    this.name = "SandboxUnavailableError";
  }
}

/**
 * The probe runs as a uid of the range claimed host-wide for its duration,
 * from the top (sessions take the first ones first): another runner starting
 * beside this one sweeps unclaimed uids of its range, and would kill the probe.
 */
async function probeAsClaimedUid(settings: SandboxSettings, path: string): Promise<BwrapCapability> {
  mkdirSync(DEFAULT_UID_CLAIM_DIR, { recursive: true, mode: 0o700 });
  for (let uid = settings.uidFirst + settings.uidCount - 1; uid >= settings.uidFirst; uid--) {
    if (!claimUid(DEFAULT_UID_CLAIM_DIR, uid)) continue;
    try {
      return await probeBwrap({ uid, gid: uid, path });
    } finally {
      releaseUid(DEFAULT_UID_CLAIM_DIR, uid);
    }
  }
  throw new SandboxUnavailableError(`no free uid in ${settings.uidFirst}..${settings.uidFirst + settings.uidCount - 1} to probe bwrap as`);
}

export async function chooseSandbox(settings: SandboxSettings, deps: { log: Logger; childPath: string; images?: SandboxImages }): Promise<SandboxBackend> {
  const { log } = deps;
  if (settings.backend !== SandboxKind.process) {
    const cap = await probeAsClaimedUid(settings, deps.childPath);
    if (cap.works && cap.tools) {
      const backend = createBwrapBackend({ ...deps, cap, tools: cap.tools, settings });
      // What each session is held to: rlimits always; memory, cpu and pids only where the host delegates cgroup v2 controllers.
      const limits = { ...settings.limits.rlimits, ...(cap.cgroup.delegated ? settings.limits.cgroup : {}) };
      log.info({ version: cap.version, network: cap.network.works, enforced: backend.limits.map((l) => `limits:${l}`), limits, cgroupReason: cap.cgroup.reason }, "sandbox: bwrap");
      return backend;
    }
    if (settings.backend === SandboxKind.bwrap) throw new SandboxUnavailableError(`PADDOCK_SANDBOX=bwrap, but bwrap does not work here: ${cap.reason ?? "unknown"}`);
    log.warn({ reason: cap.reason }, "sandbox: bwrap does not work here (PADDOCK_SANDBOX=auto), falling back to process");
  }
  log.warn(
    "SESSIONS ARE NOT ISOLATED: sandbox backend 'process' runs every session as a plain process of the runner's own user, able to read the runner's data dir, other sessions and service credentials. For development only; set PADDOCK_SANDBOX=bwrap (or auto) on any shared host.",
  );
  return createProcessBackend(deps);
}
