/**
 * Per-session host uids. Each live session runs as a uid of its own from a
 * range the runner is configured with (its gid is the same number): never 0,
 * never the runner's, never another live session's. Because no one else runs
 * as it, the uid is the session's identity on the host: RLIMIT_NPROC counts
 * exactly its processes, file ownership marks exactly its files, and
 * "every process of uid U" is exactly the session (signal.ts).
 *
 * A uid that still owns processes (a previous runner's session that outlived
 * it, or one not yet reaped) is skipped, not reused. Every allocation is also
 * claimed host-wide, a file `<claimDir>/<uid>` created exclusively and naming
 * the claiming pid: two runners (or two test workers) on one host whose ranges
 * overlap never hand out the same uid, which would let one's session signal or
 * read the other's. A claim whose pid is gone and whose uid owns no process is
 * stale and taken over. `/run` is cleared at boot, so are the claims.
 */
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";

/** Where uids are claimed host-wide unless the runner says otherwise. */
export const DEFAULT_UID_CLAIM_DIR = "/run/paddock/uids";

export interface SessionIds {
  uid: number;
  gid: number;
  /** The uid's offset in the range: network.ts numbers the session's addresses and interface by it. */
  slot: number;
}

export interface UidAllocatorOptions {
  /** The first uid of the range (> 0). */
  first: number;
  /** How many uids the range holds. */
  count: number;
  /** uids never handed out (the runner's own, at least). */
  reserved: readonly number[];
  /** Whether a uid still owns processes; scans /proc by default. */
  inUse?: (uid: number) => boolean;
  /** The host-wide claim directory (DEFAULT_UID_CLAIM_DIR); every allocator on a host must use the same one. */
  claimDir?: string;
}

export class UidRangeError extends Error {
  readonly code = "uid_range";
  constructor(message: string) {
    super(message);
    this.name = "UidRangeError";
  }
}

export interface UidAllocator {
  /** A free uid for sessionId; throws UidRangeError when none is left. The same session asking again gets the same ids. */
  allocate(sessionId: string): SessionIds;
  /** Frees the session's uid (after its processes are gone). */
  release(sessionId: string): void;
  /** The session's ids, when it holds some. */
  get(sessionId: string): SessionIds | undefined;
}

export function createUidAllocator(opts: UidAllocatorOptions): UidAllocator {
  if (!Number.isInteger(opts.first) || opts.first <= 0) throw new UidRangeError("the uid range must start above 0");
  if (!Number.isInteger(opts.count) || opts.count <= 0) throw new UidRangeError("the uid range must hold at least one uid");
  const inUse = opts.inUse ?? uidHasProcesses;
  const claimDir = opts.claimDir ?? DEFAULT_UID_CLAIM_DIR;
  mkdirSync(claimDir, { recursive: true, mode: 0o700 });
  const reserved = new Set(opts.reserved);
  const bySession = new Map<string, SessionIds>();
  const taken = new Set<number>();
  // Round robin from where the last allocation stopped: a just-released uid is reused last.
  let next = 0;
  return {
    allocate(sessionId) {
      const held = bySession.get(sessionId);
      if (held) return held;
      for (let i = 0; i < opts.count; i++) {
        const slot = (next + i) % opts.count;
        const uid = opts.first + slot;
        if (taken.has(uid) || reserved.has(uid) || inUse(uid) || !claimUid(claimDir, uid, inUse)) continue;
        next = (slot + 1) % opts.count;
        const ids = { uid, gid: uid, slot };
        taken.add(uid);
        bySession.set(sessionId, ids);
        return ids;
      }
      throw new UidRangeError(`no free session uid in ${opts.first}..${opts.first + opts.count - 1}`);
    },
    release(sessionId) {
      const ids = bySession.get(sessionId);
      if (!ids) return;
      bySession.delete(sessionId);
      taken.delete(ids.uid);
      releaseUid(claimDir, ids.uid);
    },
    get: (sessionId) => bySession.get(sessionId),
  };
}

/** Claims uid host-wide for this process; false when another live process holds it. */
export function claimUid(claimDir: string, uid: number, inUse: (uid: number) => boolean = uidHasProcesses): boolean {
  const path = join(claimDir, String(uid));
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, "wx", 0o600);
      try {
        writeSync(fd, String(process.pid));
      } finally {
        closeSync(fd);
      }
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const holder = claimHolder(path);
    // Held by a live process (this one included: another allocator of ours), or its uid still runs something.
    if (holder === undefined || pidAlive(holder) || inUse(uid)) return false;
    try {
      unlinkSync(path); // stale: its claimant died without releasing it
    } catch {
      // another claimant removed it first; try once more
    }
  }
  return false;
}

/** Drops this process's claim on uid (never another process's). */
export function releaseUid(claimDir: string, uid: number): void {
  const path = join(claimDir, String(uid));
  if (claimHolder(path) !== process.pid) return;
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}

/**
 * Whether a live process holds uid's claim: another runner of this host, or
 * another allocator of this process (two runner-agents in one test process),
 * or this allocator's own session. A sweep spares every held uid; only a uid
 * whose claim is gone or stale has processes that are nobody's.
 */
export function claimHeld(claimDir: string, uid: number): boolean {
  const holder = claimHolder(join(claimDir, String(uid)));
  return holder !== undefined && pidAlive(holder);
}

function claimHolder(path: string): number | undefined {
  try {
    const pid = Number(readFileSync(path, "utf8"));
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * The pids whose real uid is uid, from /proc. `live` leaves out zombies: the
 * pid namespace's init is one for a moment after the sandbox ends (bwrap's
 * outer process exits on its report, without reaping it; the host's init does).
 */
export function pidsOfUid(uid: number, opts: { live?: boolean } = {}): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let status: string;
    try {
      status = readFileSync(`/proc/${entry}/status`, "utf8");
    } catch {
      continue; // exited meanwhile
    }
    const real = /^Uid:\s+(\d+)/m.exec(status)?.[1];
    if (real === undefined || Number(real) !== uid) continue;
    if (opts.live && /^State:\s+Z/m.test(status)) continue;
    pids.push(Number(entry));
  }
  return pids;
}

export function uidHasProcesses(uid: number): boolean {
  return pidsOfUid(uid).length > 0;
}
