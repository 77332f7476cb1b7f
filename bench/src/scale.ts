import { Kvm } from "@nats-io/kv";
import type { Scope, Session } from "@paddock/contracts";
import { connectBus } from "@paddock/bus";
import { startStack, type Stack } from "@paddock/testing";
import { createSessions } from "./audit-drain.ts";
import { spawnBenchScript } from "./bench-process.ts";
import { cpuSeconds } from "./cpu.ts";
import { stopStackKeepingData } from "./leftovers.ts";
import { rssMb } from "./memory.ts";
import { startSimulatedRunner } from "./sim-runner.ts";
import { figure, type Figure } from "./stats.ts";

/** The dev token's workspace and actor: the sessions are listed through the gateway with it. */
const scope: Scope = { workspaceId: "default", actor: { id: "dev", kind: "user" } };
/** Runners registered at once (each is a consumer create and a registration rpc). */
const RUNNER_BATCH = 100;
/** How long the scheduler's CPU is sampled with nothing happening but leases and sweeps. */
const QUIET_MS = 5_000;
const GOAL_RECORDS = 100_000;

interface ListFigures {
  rows: number;
  listP50: number;
  listP99: number;
  getP50: number;
  getP99: number;
}

/** Runs bench/src/list-client-main.ts in its own process and reads its one line of figures. */
async function listFromOutside(stack: Stack, pages: number): Promise<ListFigures> {
  const child = spawnBenchScript("list-client-main.ts", [JSON.stringify({ url: stack.url, token: stack.token, pages, limit: 50 })]);
  child.stdin.end();
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  if (code !== 0) throw new Error(`list client exited ${code}`);
  return JSON.parse(out) as ListFigures;
}

/**
 * Issue 30 item 3: the control plane holding many records and runners. The
 * sessions grow stage by stage (10,000 then 100,000 in a full run) against
 * thousands of simulated runners; at each stage, once every session runs:
 * the rate they reached running, the scheduler's RSS and its CPU while
 * nothing happens (lease renewals and sweeps), and a walk of list pages from
 * another process beside single-record reads over the same path. The first
 * stage's figures are the later stages' baselines, so the growth shows.
 */
export async function scaleBench(opts: { stages: number[]; runners: number; pages: number }): Promise<Figure[]> {
  const most = Math.max(...opts.stages);
  const limits = String(most * 2);
  const stack = await startStack({ validateOutgoing: false, runners: 0, env: { scheduler: { PADDOCK_MAX_SESSIONS_PER_WORKSPACE: limits, PADDOCK_MAX_SESSIONS_PER_USER: limits } } });
  const nc = await connectBus({ servers: stack.nats.url, name: "bench-scale", validateOutgoing: false });
  const log = (m: string) => process.stderr.write(`[bench] scale: ${m}\n`);
  const schedulerPid = stack.scheduler.process.pid;
  const figures: Figure[] = [];
  try {
    const idleRss = rssMb(schedulerPid);
    const perRunner = Math.ceil(most / opts.runners) + 1;
    const runners: Array<{ stop(): Promise<void> }> = [];
    const registering = performance.now();
    for (let i = 0; i < opts.runners; i += RUNNER_BATCH) {
      const batch = Array.from({ length: Math.min(RUNNER_BATCH, opts.runners - i) }, (_, j) => startSimulatedRunner(nc, `sim-${i + j}`, perRunner));
      runners.push(...(await Promise.all(batch)));
    }
    log(`${opts.runners} runners registered in ${((performance.now() - registering) / 1000).toFixed(1)} s`);

    let running = 0;
    const waiters: Array<{ target: number; resolve: () => void }> = [];
    const watch = await (await new Kvm(nc).open("sessions")).watch({ key: `${scope.workspaceId}.>` });
    void (async () => {
      for await (const e of watch) {
        if (e.operation !== "PUT" || e.json<Session>().state !== "running") continue;
        running++;
        for (const w of waiters) if (w.target === running) w.resolve();
      }
    })();

    const firstStage = (opts.stages[0] ?? 0).toLocaleString("en-US");
    const against = (value: number | undefined) => (value === undefined ? undefined : { name: `at ${firstStage} records`, value });
    let held = 0;
    let first: { rate: number; rss: number; cpuMsPerSec: number } | undefined;
    for (const stage of opts.stages) {
      const adding = stage - held;
      const allRunning = new Promise<void>((resolve) => waiters.push({ target: running + adding, resolve }));
      const start = performance.now();
      await createSessions(nc, scope, adding);
      await allRunning;
      const rate = adding / ((performance.now() - start) / 1000);
      held = stage;
      const cpuBefore = cpuSeconds(schedulerPid);
      await new Promise((resolve) => setTimeout(resolve, QUIET_MS));
      const cpuMsPerSec = ((cpuSeconds(schedulerPid) - cpuBefore) * 1000) / (QUIET_MS / 1000);
      const rss = rssMb(schedulerPid);
      const list = await listFromOutside(stack, opts.pages);
      log(`${stage} records: ${rate.toFixed(0)} sessions/s, scheduler ${rss.toFixed(0)} MB, ${cpuMsPerSec.toFixed(0)} ms CPU/s idle; list p50 ${list.listP50.toFixed(2)} p99 ${list.listP99.toFixed(2)} ms over ${list.rows} rows; get p50 ${list.getP50.toFixed(2)} p99 ${list.getP99.toFixed(2)} ms`);
      const atGoal = stage >= GOAL_RECORDS;
      const n = stage.toLocaleString("en-US");
      figures.push(
        figure({ bench: "1 lifecycle", metric: `sessions/s → running, ${(held - adding).toLocaleString("en-US")} → ${n} records, ${opts.runners} sim runners`, value: rate, unit: "sessions/s", ...withBaseline(against(first?.rate)) }),
        figure({ bench: "7 memory", metric: `scheduler RSS, ${n} live sessions, ${opts.runners} runners`, value: rss, unit: "MB", baseline: against(first?.rss) ?? { name: "scheduler idle", value: idleRss }, ...(atGoal ? { goal: "≤ 500 MB (100,000 sessions)", met: rss <= 500 } : {}) }),
        figure({ bench: "1 lifecycle", metric: `scheduler CPU with nothing to do, ${n} records, ${opts.runners} runners`, value: cpuMsPerSec, unit: "ms/s", ...withBaseline(against(first?.cpuMsPerSec)) }),
        figure({ bench: "1 lifecycle", metric: `list page of 50 p50, ${n} records`, value: list.listP50, unit: "ms", baseline: { name: "GET one record p50", value: list.getP50 } }),
        figure({ bench: "1 lifecycle", metric: `list page of 50 p99, ${n} records`, value: list.listP99, unit: "ms", baseline: { name: "GET one record p99", value: list.getP99 }, ...(atGoal ? { goal: "p99 ≤ 20 ms (100,000 records)", met: list.listP99 <= 20 } : {}) }),
      );
      first ??= { rate, rss, cpuMsPerSec };
    }
    watch.stop();
    for (const r of runners) await r.stop();
    return figures;
  } finally {
    await nc.drain();
    await stopStackKeepingData(stack);
  }
}

function withBaseline(baseline: { name: string; value: number } | undefined): { baseline?: { name: string; value: number } } {
  return baseline ? { baseline } : {};
}
