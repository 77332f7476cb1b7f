/**
 * The composition root's choice of sandbox backend (PADDOCK_SANDBOX), made
 * once at start: `process`, `bwrap` (refused with the probe's reason where it
 * does not work), or `auto` (bwrap when its probe succeeds). The process
 * backend isolates nothing, and the runner says so loudly.
 */
import { mkdirSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";
import type { Logger } from "@paddock/logging";
import type { RunnerConfig } from "./config.ts";
import { SandboxKind, type SandboxBackend, type SandboxImages } from "./sandbox/backend.ts";
import { createBwrapBackend, type BwrapEvent } from "./sandbox/bwrap/backend.ts";
import { DEFAULT_SANDBOX_LIMITS, LimitKind } from "./sandbox/bwrap/limits.ts";
import { probeBwrap, type BwrapCapability } from "./sandbox/bwrap/probe.ts";
import { claimUid, DEFAULT_UID_CLAIM_DIR, releaseUid } from "./sandbox/bwrap/uid-allocator.ts";
import { createProcessBackend } from "./sandbox/process/backend.ts";
import { RunnerError, RunnerErrorCode } from "./errors.ts";

export type SandboxSettings = RunnerConfig["sandbox"];

/** The process backend's settings (no isolation: development only), and the base of tests' bwrap settings. */
export const PROCESS_SANDBOX: SandboxSettings = { backend: "process", hide: [], shared: [], uidFirst: 200_000, uidCount: 1_024, netInstance: undefined, netPrefix: undefined, limits: DEFAULT_SANDBOX_LIMITS, init: undefined };

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

/**
 * The first directory above the data dir a session's uid cannot pass
 * (no search bit for others): its bwrap, running as that uid, could not bind
 * its directories from below it. The data dir itself is made passable at
 * prepare; what is above it is the operator's, never chmod'ed here.
 */
export function untraversableAncestor(dataDir: string): string | undefined {
  const dirs: string[] = [];
  for (let dir = dirname(resolve(dataDir)); ; dir = dirname(dir)) {
    dirs.unshift(dir);
    if (dir === "/") break;
  }
  for (const dir of dirs) {
    const mode = statOrUndefined(dir)?.mode;
    if (mode === undefined) return undefined; // made later, with the default (passable) mode
    if ((mode & 0o001) === 0) return dir;
  }
  return undefined;
}

function statOrUndefined(path: string) {
  try {
    return statSync(path);
  } catch {
    return undefined;
  }
}

/** The exec init when session uids can run it (bwrap binds it as theirs); undefined, with a warning, when not. */
function usableInit(path: string | undefined, log: Logger): string | undefined {
  if (path === undefined) return undefined;
  const stat = statOrUndefined(path);
  const blocked = stat ? untraversableAncestor(path) : undefined;
  const why = !stat ? "not built (npm test / npm run up build it; or cc -static -O2 -o it native/paddock-init.c)" : !stat.isFile() || (stat.mode & 0o005) !== 0o005 ? "not a file others may read and run" : blocked ? `session uids cannot pass ${blocked}` : undefined;
  if (why === undefined) return path;
  log.warn({ path, why }, "no exec init: every exec starts a sandbox of its own (slower, and exec'd commands do not see each other)");
  return undefined;
}

export async function chooseSandbox(settings: SandboxSettings, deps: { log: Logger; childPath: string; dataDir?: string; images?: SandboxImages; onBwrapEvent?: (event: BwrapEvent) => void }): Promise<SandboxBackend> {
  const { log } = deps;
  if (settings.backend !== SandboxKind.process) {
    const blocked = deps.dataDir === undefined ? undefined : untraversableAncestor(deps.dataDir);
    const cap = blocked
      ? { works: false as const, tools: undefined, reason: `session uids cannot pass ${blocked} (no search permission for others) on the way to the data dir: use a data dir below passable directories, or chmod o+x ${blocked}` }
      : await probeAsClaimedUid(settings, deps.childPath);
    if (cap.works && cap.tools) {
      const backend = createBwrapBackend({ ...deps, cap, tools: cap.tools, settings: { ...settings, init: usableInit(settings.init, log) }, onEvent: deps.onBwrapEvent });
      // What each session is held to: rlimits always; memory, cpu and pids where the host offers cgroups (v2 delegated or v1 writable).
      const enforced = backend.limits.map((l) => `limits:${l}`);
      const limits = { ...settings.limits.rlimits, ...(backend.limits.includes(LimitKind.cgroup) ? settings.limits.cgroup : {}) };
      const cgroup = { kind: cap.cgroup.kind, controllers: cap.cgroup.hierarchies.flatMap((h) => h.controllers), reason: cap.cgroup.reason };
      log.info({ version: cap.version, network: cap.network.works, enforced, limits, cgroup }, "sandbox: bwrap");
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
