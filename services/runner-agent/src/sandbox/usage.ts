import { lstatSync, readdirSync, readFileSync, type Dirent } from "node:fs";
import { setImmediate } from "node:timers/promises";
import { join } from "node:path";
import { SESSION_METRICS_RETENTION_MS, type Now, type SessionMetricSample, type Usage } from "@paddock/contracts";

/** The workspace's size is walked at most this often for the metrics samples (a walk of a big tree costs). */
const DISK_SAMPLE_EVERY_MS = 30_000;

/** Linux /proc accounting units: clock ticks per second and the page size (the kernel defaults here). */
const CLOCK_TICKS_PER_SECOND = 100;
const PAGE_BYTES = 4096;
/** Bounds the workspace walk that measures storage. */
const MAX_WALKED_ENTRIES = 200_000;

interface ProcStat {
  pid: number;
  pgid: number;
  /** The real uid (from /proc/<pid>/status); read only by scans for a uid scope. */
  uid?: number;
  /** utime + stime + cutime + cstime, in clock ticks. */
  cpuTicks: number;
  rssBytes: number;
}

function parseStat(text: string): ProcStat | undefined {
  // The command name (field 2) may contain spaces and parentheses: split after the last ")".
  const close = text.lastIndexOf(")");
  if (close < 0) return undefined;
  const head = text.slice(0, text.indexOf(" "));
  const f = text.slice(close + 2).split(" ");
  // f[0] is field 3 (state); field n is f[n - 3].
  const num = (n: number) => Number(f[n - 3] ?? 0);
  return { pid: Number(head), pgid: num(5), cpuTicks: num(14) + num(15) + num(16) + num(17), rssBytes: num(24) * PAGE_BYTES };
}

/** Every process on the host, as /proc says; with `uids`, also each one's real uid (a second read per process). */
/**
 * Every process's stat (and uid). /proc files are read with synchronous
 * calls, a slice of processes per event-loop turn: each read is a few
 * microseconds, where an awaited one is several thread-pool round trips, and
 * a cold suspend's last sample spent ~180 ms here (issue 30).
 */
async function scanProcesses(uids: boolean): Promise<ProcStat[]> {
  const out: ProcStat[] = [];
  let seen = 0;
  for (const name of readDirNames("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    if (++seen % WALK_SLICE_ENTRIES === 0) await setImmediate();
    const stat = parseStat(readProcFile(`/proc/${name}/stat`));
    if (!stat) continue;
    if (uids) {
      const uid = /^Uid:\s+(\d+)/m.exec(readProcFile(`/proc/${name}/status`))?.[1];
      if (uid === undefined) continue;
      stat.uid = Number(uid);
    }
    out.push(stat);
  }
  return out;
}

/** A /proc file's text; empty when the process is gone. */
function readProcFile(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}

function readDirNames(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/**
 * Whose processes are a session's: its apps' process groups (each app leads
 * its own), or every process of a uid when the backend gives the session a
 * uid of its own (bwrap: a piped app's sandbox starts a new session, and
 * anything may setsid out of its group, but nothing leaves the uid). With a
 * cgroup of its own, `cpuNanos` reads the session's CPU time from it: exact,
 * processes that exited between samples included.
 */
export type UsageScope = { groups: readonly number[] } | { uid: number; cpuNanos?: (() => number | undefined) | undefined };

/**
 * One /proc scan serves every session's periodic sample taken within
 * SHARED_SCAN_MS of it: a scan reads every process's stat file, and a runner
 * with many sessions (each sampled every few seconds) otherwise spent most of
 * its CPU here (found profiling create → running, issue 8).
 */
const SHARED_SCAN_MS = 1_000;
type SharedScan = { at: number; procs: Promise<ProcStat[]> } | undefined;
let sharedScan: SharedScan;
/** The same for scans that read uids too (only runners with uid scopes pay for them). */
let sharedUidScan: SharedScan;

function scanned(uids: boolean, fresh: boolean): Promise<ProcStat[]> {
  const at = performance.now();
  const current = uids ? sharedUidScan : sharedScan;
  if (!fresh && current && at - current.at <= SHARED_SCAN_MS) return current.procs;
  const next = { at, procs: scanProcesses(uids) };
  if (uids) sharedUidScan = next;
  else sharedScan = next;
  return next.procs;
}

/** Every process of the scope; `fresh` skips the shared scan. */
async function processesIn(scope: UsageScope, fresh: boolean): Promise<ProcStat[]> {
  if ("uid" in scope) return (await scanned(true, fresh)).filter((p) => p.uid === scope.uid);
  const groups = new Set(scope.groups);
  if (groups.size === 0) return [];
  return (await scanned(false, fresh)).filter((p) => groups.has(p.pgid));
}

/** Entries measured between two turns of the event loop. */
const WALK_SLICE_ENTRIES = 256;

/**
 * Bytes of regular files under dir (bounded walk; links are not followed).
 * Directories are read and files measured with sync calls, a slice of
 * entries per event-loop turn: each call is a few microseconds, where an
 * awaited one is a libuv pool round trip and the walk of a 2,600-file
 * workspace took 300 ms of the cold-suspend path (issue 8).
 */
export async function storageBytes(dir: string): Promise<number> {
  let total = 0;
  let seen = 0;
  const stack = [dir];
  while (stack.length > 0 && seen < MAX_WALKED_ENTRIES) {
    const current = stack.pop() ?? "";
    for (const entry of readDirOrNone(current)) {
      if (seen >= MAX_WALKED_ENTRIES) break;
      seen++;
      const path = join(current, entry.name);
      if (entry.isDirectory()) stack.push(path);
      else if (entry.isFile()) total += sizeOrZero(path);
      if (seen % WALK_SLICE_ENTRIES === 0) await setImmediate();
    }
  }
  return total;
}

function readDirOrNone(dir: string): Dirent[] {
  try {
    return readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
}

function sizeOrZero(path: string): number {
  try {
    return lstatSync(path, { throwIfNoEntry: false })?.size ?? 0;
  } catch {
    return 0;
  }
}

/**
 * Samples what one placement generation of a session uses: CPU time and
 * memory byte-seconds of its processes (its UsageScope), every sampleMs. A process
 * is only seen while alive, so the last interval of one that exits between
 * samples is not counted (documented as the sampling error), except for CPU
 * time where the session's cgroup counts it (`cpuNanos`). Network bytes
 * are what passed the session's egress proxy (`networkBytes`, read at the
 * end); traffic that bypasses the proxy is not measured with the process backend.
 */
export class UsageMeter {
  private readonly lastTicks = new Map<number, number>();
  private cpuTicks = 0;
  /** The session cgroup's CPU time when the generation began, where it has one. */
  private readonly cpuNanosAtStart: number | undefined;
  private memoryByteSeconds = 0;
  private lastSampleAt: number;
  private timer: NodeJS.Timeout | undefined;
  private sampling: Promise<void> = Promise.resolve();
  /** The last hour of samples (SessionMetrics), oldest first. */
  private readonly ring: SessionMetricSample[] = [];
  private readonly ringSize: number;
  private diskBytes = 0;
  private diskAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly scope: () => UsageScope,
    private readonly now: Now,
    readonly sampleMs: number,
    private readonly networkBytes: () => number = () => 0,
    /** The workspace whose size the samples carry; none: 0. */
    private readonly workspace?: string,
  ) {
    this.lastSampleAt = now();
    this.cpuNanosAtStart = cgroupCpuNanos(scope());
    this.ringSize = Math.max(1, Math.ceil(SESSION_METRICS_RETENTION_MS / sampleMs));
  }

  /** The samples kept, oldest first (a copy). */
  samples(): SessionMetricSample[] {
    return [...this.ring];
  }

  start(): void {
    this.timer ??= setInterval(() => void this.sample(), this.sampleMs);
    this.timer.unref();
  }

  /** One sample now (serialised with the periodic ones); `fresh` reads /proc anew rather than a scan shared with other sessions. */
  sample(fresh = false): Promise<void> {
    this.sampling = this.sampling.then(async () => {
      const procs = await processesIn(this.scope(), fresh);
      const at = this.now();
      const seconds = Math.max(0, at - this.lastSampleAt) / 1000;
      this.lastSampleAt = at;
      let rss = 0;
      for (const p of procs) {
        const before = this.lastTicks.get(p.pid) ?? 0;
        if (p.cpuTicks > before) this.cpuTicks += p.cpuTicks - before;
        this.lastTicks.set(p.pid, p.cpuTicks);
        rss += p.rssBytes;
      }
      this.memoryByteSeconds += Math.round(rss * seconds);
      await this.record(at, rss, fresh);
    });
    return this.sampling;
  }

  private async record(at: number, rssBytes: number, fresh: boolean): Promise<void> {
    if (this.workspace !== undefined && (fresh || at - this.diskAt >= DISK_SAMPLE_EVERY_MS)) {
      this.diskAt = at;
      this.diskBytes = await storageBytes(this.workspace).catch(() => this.diskBytes);
    }
    this.ring.push({ at, cpuSeconds: this.cpuSeconds(), memoryBytes: rssBytes, diskBytes: this.diskBytes, networkBytes: this.networkBytes() });
    if (this.ring.length > this.ringSize) this.ring.shift();
  }

  /** CPU time since the generation began: the cgroup's where there is one, else the processes' ticks. */
  private cpuSeconds(): number {
    const nanos = this.cpuNanosAtStart === undefined ? undefined : cgroupCpuNanos(this.scope());
    return nanos === undefined || this.cpuNanosAtStart === undefined ? this.cpuTicks / CLOCK_TICKS_PER_SECOND : Math.max(0, nanos - this.cpuNanosAtStart) / 1e9;
  }

  /** Stops sampling and answers the generation's totals (with a last sample and the workspace size). */
  async finish(workspace: string): Promise<Usage> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.sample(true);
    return {
      cpuTimeSeconds: this.cpuSeconds(),
      memoryByteSeconds: this.memoryByteSeconds,
      storageBytes: await storageBytes(workspace),
      networkBytes: this.networkBytes(),
      agentTokenCount: 0,
    };
  }
}

function cgroupCpuNanos(scope: UsageScope): number | undefined {
  return "uid" in scope ? scope.cpuNanos?.() : undefined;
}
