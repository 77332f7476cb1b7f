/**
 * Per-session host uids. Each live session runs as a uid of its own from a
 * range the runner is configured with (its gid is the same number): never 0,
 * never the runner's, never another live session's. Because no one else runs
 * as it, the uid is the session's identity on the host: RLIMIT_NPROC counts
 * exactly its processes, file ownership marks exactly its files, and
 * "every process of uid U" is exactly the session (signal.ts).
 *
 * A uid that still owns processes (a previous runner's session that outlived
 * it, or one not yet reaped) is skipped, not reused.
 */
import { readdirSync, readFileSync } from "node:fs";

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
        if (taken.has(uid) || reserved.has(uid) || inUse(uid)) continue;
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
    },
    get: (sessionId) => bySession.get(sessionId),
  };
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
