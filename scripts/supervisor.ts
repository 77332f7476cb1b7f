// Keeps `npm run up`'s processes running: a process that exits is restarted
// with exponential backoff (and the restart logged) instead of stopping the
// rest; `stop()` ends them all, by tier, and kills one that ignores SIGTERM
// after a grace period. Time comes from injected timers so tests drive it.
import type { ChildProcess } from "node:child_process";

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** One OS process of a unit. */
export interface Proc {
  readonly pid: number | undefined;
  readonly exited: Promise<Exit>;
  kill(signal: NodeJS.Signals): void;
}

export interface Unit {
  readonly name: string;
  /** Units of a higher tier are stopped first (services before the nats-server they drain into). */
  readonly tier: number;
  /** Starts one process: calls `spawned` as soon as it exists, resolves once it is ready, rejects if it ends first. */
  start(spawned: (proc: Proc) => void): Promise<void>;
}

export interface Timers {
  now(): number;
  /** Calls fn after ms; the result cancels it. */
  after(ms: number, fn: () => void): () => void;
}

export const realTimers: Timers = {
  now: () => Date.now(),
  after: (ms, fn) => {
    const t = setTimeout(fn, ms);
    return () => clearTimeout(t);
  },
};

export interface Backoff {
  /** Delay before the first restart; each further consecutive restart doubles it... */
  initialMs: number;
  /** ...up to this. */
  maxMs: number;
  /** A process that ran this long counts as healthy: its next exit restarts after initialMs again. */
  stableMs: number;
}

export const DEFAULT_BACKOFF: Backoff = { initialMs: 200, maxMs: 30_000, stableMs: 60_000 };

export interface SupervisorOptions {
  log: (line: string) => void;
  /** How long a process may take to exit after SIGTERM before it gets SIGKILL. */
  stopGraceMs: number;
  backoff?: Backoff;
  timers?: Timers;
}

/** The delay before the attempt-th consecutive restart (1-based). */
export function restartDelayMs(backoff: Backoff, attempt: number): number {
  return Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.max(0, attempt - 1));
}

export function describeExit(exit: Exit): string {
  return exit.signal ? `signal ${exit.signal}` : `code ${String(exit.code)}`;
}

/** A Proc over a spawned child (whether or not it has exited yet). */
export function childProc(child: ChildProcess): Proc {
  const alive = () => child.exitCode === null && child.signalCode === null;
  const exited = alive()
    ? new Promise<Exit>((r) => child.once("exit", (code, signal) => r({ code, signal })))
    : Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return {
    pid: child.pid,
    exited,
    kill: (signal) => {
      if (alive()) child.kill(signal);
    },
  };
}

export class Supervisor {
  private stopping = false;
  private stopped: Promise<void> | undefined;
  private readonly current = new Map<string, Proc>();
  private readonly pendingWaits = new Set<() => void>();
  private readonly loops: Array<Promise<void>> = [];
  private readonly timers: Timers;
  private readonly backoff: Backoff;

  constructor(
    private readonly units: readonly Unit[],
    private readonly opts: SupervisorOptions,
  ) {
    this.timers = opts.timers ?? realTimers;
    this.backoff = opts.backoff ?? DEFAULT_BACKOFF;
  }

  /** Starts the units in order, each once the previous is ready, then supervises them. Rejects if one fails to start. */
  async start(): Promise<void> {
    for (const unit of this.units) {
      // A stop during the start ends it: nothing more is started behind its back.
      if (this.stopping) throw new Error(`stopped before ${unit.name} started`);
      await this.startOnce(unit);
    }
    for (const unit of this.units) this.loops.push(this.supervise(unit));
  }

  /** The unit's current process (the latest started). */
  proc(name: string): Proc | undefined {
    return this.current.get(name);
  }

  /** Stops every unit, highest tier first (a tier in parallel); idempotent. */
  stop(): Promise<void> {
    this.stopped ??= this.stopAll();
    return this.stopped;
  }

  private async stopAll(): Promise<void> {
    this.stopping = true;
    for (const abort of [...this.pendingWaits]) abort();
    const tiers = [...new Set(this.units.map((u) => u.tier))].sort((a, b) => b - a);
    for (const tier of tiers) await Promise.all(this.units.filter((u) => u.tier === tier).map((u) => this.stopUnit(u)));
    await Promise.all(this.loops);
  }

  private async stopUnit(unit: Unit): Promise<void> {
    const proc = this.current.get(unit.name);
    if (!proc) return;
    proc.kill("SIGTERM");
    let cancel = () => {};
    const late = new Promise<false>((r) => {
      cancel = this.timers.after(this.opts.stopGraceMs, () => r(false));
    });
    const inTime = await Promise.race([proc.exited.then(() => true), late]);
    cancel();
    if (!inTime) {
      this.opts.log(`${unit.name} did not exit within ${String(this.opts.stopGraceMs)}ms of SIGTERM; killing it (pid ${String(proc.pid)})`);
      proc.kill("SIGKILL");
      await proc.exited;
    }
  }

  private async startOnce(unit: Unit): Promise<void> {
    let proc: Proc | undefined;
    await unit.start((p) => {
      proc = p;
      this.current.set(unit.name, p);
    });
    if (!proc) throw new Error(`${unit.name} started without a process`);
    this.opts.log(`${unit.name} started (pid ${String(proc.pid)})`);
  }

  private async supervise(unit: Unit): Promise<void> {
    let attempt = 0;
    let since = this.timers.now();
    for (;;) {
      const proc = this.current.get(unit.name);
      if (!proc) return;
      const exit = await proc.exited;
      if (this.stopping) return;
      attempt = this.timers.now() - since >= this.backoff.stableMs ? 1 : attempt + 1;
      const delayMs = restartDelayMs(this.backoff, attempt);
      this.opts.log(`${unit.name} exited (${describeExit(exit)}); restarting in ${String(delayMs)}ms (attempt ${String(attempt)})`);
      if (!(await this.wait(delayMs))) return;
      since = this.timers.now();
      try {
        await this.startOnce(unit);
      } catch (err) {
        if (this.stopping) return;
        // Its process has exited (or never existed): the loop backs off again.
        this.opts.log(`${unit.name} failed to start: ${firstLine(err)}`);
      }
    }
  }

  /** Resolves true after ms, or false at once when stopping. */
  private wait(ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const abort = () => {
        this.pendingWaits.delete(abort);
        cancel();
        resolve(false);
      };
      const cancel = this.timers.after(ms, () => {
        this.pendingWaits.delete(abort);
        resolve(true);
      });
      this.pendingWaits.add(abort);
    });
  }
}

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split("\n")[0] ?? "";
}
