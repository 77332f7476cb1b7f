/**
 * `npm run up`'s supervisor against real child processes, with its timers
 * injected: the test sees every delay it asks for and fires it, so backoff
 * and the stop grace period are checked without waiting on the clock.
 */
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";
import { childProc, Supervisor, type Proc, type Timers, type Unit } from "../../scripts/supervisor.ts";

interface Pending {
  ms: number;
  fn: () => void;
  cancelled: boolean;
}

/** Timers the test fires by hand; `next()` resolves when the supervisor asks for one. */
class ManualTimers implements Timers {
  t = 0;
  private readonly queue: Pending[] = [];
  private waiter: ((p: Pending) => void) | undefined;
  now = () => this.t;
  after = (ms: number, fn: () => void) => {
    const p: Pending = { ms, fn, cancelled: false };
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w(p);
    } else this.queue.push(p);
    return () => {
      p.cancelled = true;
    };
  };
  next(): Promise<Pending> {
    const queued = this.queue.shift();
    if (queued) return Promise.resolve(queued);
    return new Promise((r) => (this.waiter = r));
  }
  fire(p: Pending): void {
    this.t += p.ms;
    if (!p.cancelled) p.fn();
  }
}

/** A real node process running `code`; ready once it prints "ready" (after installing its handlers), or once spawned. */
function nodeUnit(name: string, code: string, tier = 1, readyOnSpawn = false): Unit & { procs: Proc[] } {
  const procs: Proc[] = [];
  return {
    name,
    tier,
    procs,
    start: (spawned) => {
      const child = spawn(process.execPath, ["-e", code], { stdio: ["ignore", "pipe", "ignore"] });
      const proc = childProc(child);
      procs.push(proc);
      spawnedProcs.push(proc);
      spawned(proc);
      return new Promise<void>((resolve, reject) => {
        if (readyOnSpawn) child.once("spawn", () => resolve());
        createInterface({ input: child.stdout }).on("line", (l) => {
          if (l === "ready") resolve();
        });
        void proc.exited.then(() => reject(new Error(`${name} exited before ready`)));
      });
    },
  };
}

const LONG = "setInterval(() => {}, 1e9); console.log('ready');";
const IGNORES_TERM = "process.on('SIGTERM', () => {}); setInterval(() => {}, 1e9); console.log('ready');";
const backoff = { initialMs: 100, maxMs: 400, stableMs: 10_000 };

/** Every process a test spawned: whatever one leaves running (a failed assertion) is killed after it. */
const spawnedProcs: Proc[] = [];
afterEach(async () => {
  for (const p of spawnedProcs.splice(0)) {
    p.kill("SIGKILL");
    await p.exited;
  }
});

/** The line the supervisor logs next (an event, never a sleep). */
function logCollector() {
  const lines: string[] = [];
  let waiter: { pred: (l: string) => boolean; resolve: (l: string) => void } | undefined;
  return {
    lines,
    log: (line: string) => {
      lines.push(line);
      if (waiter?.pred(line)) {
        const w = waiter;
        waiter = undefined;
        w.resolve(line);
      }
    },
    waitFor: (pred: (l: string) => boolean) => {
      const seen = lines.find(pred);
      if (seen) return Promise.resolve(seen);
      return new Promise<string>((resolve) => (waiter = { pred, resolve }));
    },
  };
}

describe("supervisor", () => {
  it("restarts a process that exits, doubling the delay up to the cap, and logs each restart", async () => {
    const timers = new ManualTimers();
    const logs = logCollector();
    const unit = nodeUnit("flaky", "process.exit(3)", 1, true);
    const supervisor = new Supervisor([unit], { log: logs.log, stopGraceMs: 5_000, backoff, timers });
    await supervisor.start();
    const delays: number[] = [];
    for (let i = 0; i < 4; i++) {
      const t = await timers.next();
      delays.push(t.ms);
      timers.fire(t);
    }
    expect(delays).toEqual([100, 200, 400, 400]);
    expect(logs.lines).toContain("flaky exited (code 3); restarting in 100ms (attempt 1)");
    expect(logs.lines).toContain("flaky exited (code 3); restarting in 400ms (attempt 4)");
    expect(new Set(unit.procs.map((p) => p.pid)).size).toBe(unit.procs.length);
    expect(unit.procs.length).toBeGreaterThanOrEqual(4);
  });

  it("restarts a killed process; one that ran for stableMs restarts after the initial delay again", async () => {
    const timers = new ManualTimers();
    const logs = logCollector();
    const unit = nodeUnit("svc", LONG);
    const supervisor = new Supervisor([unit], { log: logs.log, stopGraceMs: 5_000, backoff, timers });
    await supervisor.start();
    const killAndRestart = async (n: number) => {
      const before = supervisor.proc("svc");
      before?.kill("SIGKILL");
      const t = await timers.next();
      timers.fire(t);
      await logs.waitFor((l) => l.startsWith("svc started") && unit.procs.length === n);
      expect(supervisor.proc("svc")?.pid).not.toBe(before?.pid);
      return t.ms;
    };
    expect(await killAndRestart(2)).toBe(100);
    expect(await killAndRestart(3)).toBe(200);
    timers.t += backoff.stableMs;
    expect(await killAndRestart(4)).toBe(100);
    expect(logs.lines).toContain("svc exited (signal SIGKILL); restarting in 200ms (attempt 2)");
  });

  it("stop: SIGTERM by tier, SIGKILL after the grace period to a process that ignores SIGTERM, and no restart", async () => {
    const timers = new ManualTimers();
    const logs = logCollector();
    const broker = nodeUnit("broker", LONG, 0);
    const good = nodeUnit("good", LONG);
    const wedged = nodeUnit("wedged", IGNORES_TERM);
    const s = new Supervisor([broker, good, wedged], { log: logs.log, stopGraceMs: 5_000, backoff, timers });
    await s.start();
    const stopped = s.stop();
    // The services get their grace timers first; the broker (lower tier) is still running meanwhile.
    const graces = [await timers.next(), await timers.next()];
    expect(graces.map((g) => g.ms)).toEqual([5_000, 5_000]);
    expect(await good.procs[0]?.exited).toEqual({ code: null, signal: "SIGTERM" });
    const brokerExit = broker.procs[0]?.exited;
    let brokerDone = false;
    void brokerExit?.then(() => (brokerDone = true));
    for (const g of graces) timers.fire(g);
    expect(await wedged.procs[0]?.exited).toEqual({ code: null, signal: "SIGKILL" });
    expect(brokerDone).toBe(false);
    const brokerGrace = await timers.next(); // asked for once the services are gone; never fired
    expect(await brokerExit).toEqual({ code: null, signal: "SIGTERM" });
    await stopped;
    expect(brokerGrace.cancelled).toBe(true);
    expect(logs.lines.filter((l) => l.includes("did not exit"))).toEqual([`wedged did not exit within 5000ms of SIGTERM; killing it (pid ${String(wedged.procs[0]?.pid)})`]);
    expect(logs.lines.some((l) => l.includes("restarting"))).toBe(false);
    expect([broker, good, wedged].map((u) => u.procs.length)).toEqual([1, 1, 1]);
  });

  it("a stop while units are starting starts nothing more", async () => {
    const timers = new ManualTimers();
    const logs = logCollector();
    // Ready only once told to stop (it ignores SIGTERM): its start completes after the stop began.
    let onArmed: () => void = () => {};
    const armed = new Promise<void>((resolve) => (onArmed = resolve));
    const late: Unit & { procs: Proc[] } = {
      name: "late",
      tier: 1,
      procs: [],
      start: (spawned) => {
        const child = spawn(process.execPath, ["-e", "process.on('SIGTERM', () => console.log('ready')); console.log('armed'); setInterval(() => {}, 1e9);"], { stdio: ["ignore", "pipe", "ignore"] });
        const proc = childProc(child);
        late.procs.push(proc);
        spawnedProcs.push(proc);
        spawned(proc);
        return new Promise<void>((resolve) => {
          createInterface({ input: child.stdout }).on("line", (l) => {
            if (l === "armed") onArmed();
            if (l === "ready") resolve();
          });
        });
      },
    };
    const next = nodeUnit("next", LONG);
    const s = new Supervisor([late, next], { log: logs.log, stopGraceMs: 5_000, backoff, timers });
    const starting = s.start();
    await armed;
    const stopped = s.stop();
    await expect(starting).rejects.toThrow("stopped before next started");
    timers.fire(await timers.next()); // late's grace period
    await stopped;
    expect(await late.procs[0]?.exited).toEqual({ code: null, signal: "SIGKILL" });
    expect(next.procs).toEqual([]);
  });

  it("stop while a restart is pending cancels it", async () => {
    const timers = new ManualTimers();
    const logs = logCollector();
    const unit = nodeUnit("svc", LONG);
    const s = new Supervisor([unit], { log: logs.log, stopGraceMs: 5_000, backoff, timers });
    await s.start();
    s.proc("svc")?.kill("SIGKILL");
    const pending = await timers.next();
    await s.stop();
    expect(pending.cancelled).toBe(true);
    expect(unit.procs.length).toBe(1);
  });
});
