/**
 * The bwrap backend through the runner (issue #23's performance goals): the
 * same create → running, echo and output measurements on a stack whose
 * runner uses the process backend and on one whose runner uses bwrap, in the
 * same run, as ratios bwrap / process. The sandbox's own overhead is the
 * difference of the two create p50s (the process backend's create is a bare
 * PTY spawn plus the control plane), printed beside a bare `bwrap` spawn.
 * The bwrap runner keeps sandboxes started ahead (its warm pool, decision
 * 0045): how many timed creates claimed one (the runner's
 * paddock_sandbox_app_starts_total) is printed beside the create figures, and
 * the same creates on a runner without the pool (every sandbox launched on
 * the create's path) are timed too. Needs root, as the runner's bwrap backend does.
 */
import { spawn } from "node:child_process";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { startStack, type Stack } from "@paddock/testing";
import { stopStackKeepingData } from "./leftovers.ts";
import { figure, percentile, type Figure } from "./stats.ts";
import { drain, echoSamples, openWs, post, runningWatch, stageClock, type RunningWatch } from "./terminal.ts";

/** A bwrap runner's own uids, network names and addresses: clear of the primitive bench's (140,000; 10.212) and the tests'. */
/** The bwrap runner's warm pool (its default). */
const WARM_POOL_SIZE = 2;
const BWRAP_RUNNER_ENV = {
  PADDOCK_SANDBOX: "bwrap",
  PADDOCK_SANDBOX_WARM_POOL: String(WARM_POOL_SIZE),
  PADDOCK_SANDBOX_UID_FIRST: "141000",
  PADDOCK_SANDBOX_UID_COUNT: "256",
  PADDOCK_SANDBOX_NET_INSTANCE: "bnr",
  PADDOCK_SANDBOX_NET_PREFIX: "10.211",
};

interface BackendFigures {
  createMs: number[];
  /** The runner's part of each create: DISPATCH → its running fact (the rest is the control plane's, the same on both backends). */
  runnerMs: number[];
  /** The timed creates' apps by how they started (bwrap only): on a warm sandbox, or launched on the create's path. */
  starts: { warm: number; cold: number };
  echoMs: number[];
  outputMBs: number;
}

const log = (m: string) => process.stderr.write(`[bench] ${m}\n`);

export async function sandboxRunnerBenches(opts: { samples: number; echoSamples: number; megabytes: number }): Promise<Figure[]> {
  const bareBwrap = await bareBwrapMs(opts.samples);
  log("runner on the process backend");
  const proc = await measureBackend({ PADDOCK_SANDBOX: "process" }, opts);
  log("runner on the bwrap backend");
  const bwrap = await measureBackend(BWRAP_RUNNER_ENV, { ...opts, warmPool: WARM_POOL_SIZE });
  log(`bwrap: ${bwrap.starts.warm} of ${opts.samples} timed creates started warm (claimed from the pool), ${bwrap.starts.cold} cold`);
  log("runner on the bwrap backend without its warm pool (creates only)");
  const noPool = await measureBackend({ ...BWRAP_RUNNER_ENV, PADDOCK_SANDBOX_WARM_POOL: "0" }, { ...opts, createsOnly: true });
  const p50 = (s: number[]) => percentile(s, 50);
  const p99 = (s: number[]) => percentile(s, 99);
  const overhead = p50(bwrap.createMs) - p50(proc.createMs);
  const bench = "sandbox runner";
  return [
    figure({ bench, metric: "create→running on bwrap p50", value: p50(bwrap.createMs), unit: "ms", baseline: { name: "on process p50", value: p50(proc.createMs) }, goal: "≤ 30 ms", met: p50(bwrap.createMs) <= 30 }),
    figure({ bench, metric: "create→running on bwrap p99", value: p99(bwrap.createMs), unit: "ms", baseline: { name: "on process p99", value: p99(proc.createMs) }, goal: "≤ 100 ms", met: p99(bwrap.createMs) <= 100 }),
    figure({ bench, metric: "creates on bwrap that started warm (pool hit)", value: bwrap.starts.warm, unit: `of ${opts.samples}` }),
    figure({ bench, metric: "sandbox overhead (bwrap create p50 - process create p50)", value: overhead, unit: "ms", baseline: { name: "bare bwrap spawn p50", value: p50(bareBwrap) }, goal: "≤ 10 ms", met: overhead <= 10 }),
    figure({ bench, metric: "the runner's part of a create (DISPATCH → running fact) on bwrap p50", value: p50(bwrap.runnerMs), unit: "ms", baseline: { name: "on process p50", value: p50(proc.runnerMs) } }),
    figure({ bench, metric: "create→running on bwrap without the warm pool p50", value: p50(noPool.createMs), unit: "ms", baseline: { name: "on process p50", value: p50(proc.createMs) } }),
    figure({ bench, metric: "the runner's part of a create on bwrap without the warm pool p50", value: p50(noPool.runnerMs), unit: "ms", baseline: { name: "on process p50", value: p50(proc.runnerMs) } }),
    figure({ bench, metric: "create→running on bwrap without the warm pool p99", value: p99(noPool.createMs), unit: "ms", baseline: { name: "on process p99", value: p99(proc.createMs) } }),
    figure({ bench, metric: "echo on bwrap p50", value: p50(bwrap.echoMs), unit: "ms", baseline: { name: "on process p50", value: p50(proc.echoMs) }, goal: "≤ 1.1x process", met: p50(bwrap.echoMs) <= 1.1 * p50(proc.echoMs) }),
    figure({ bench, metric: "echo on bwrap p99", value: p99(bwrap.echoMs), unit: "ms", baseline: { name: "on process p99", value: p99(proc.echoMs) }, goal: "≤ 1.1x process", met: p99(bwrap.echoMs) <= 1.1 * p99(proc.echoMs) }),
    figure({ bench, metric: `${opts.megabytes} MB output on bwrap`, value: bwrap.outputMBs, unit: "MB/s", baseline: { name: "on process", value: proc.outputMBs }, goal: "≥ 0.9x process", met: bwrap.outputMBs >= 0.9 * proc.outputMBs }),
  ];
}

interface MeasureOptions {
  samples: number;
  echoSamples: number;
  megabytes: number;
  createsOnly?: boolean;
  /** The runner's warm pool: each create, echo and output session starts once it is full again (0: none). */
  warmPool?: number;
}

async function measureBackend(runnerEnv: Record<string, string>, opts: MeasureOptions): Promise<BackendFigures> {
  const stack = await startStack({ validateOutgoing: false, runnerCapacity: 64, env: { gateway: { PADDOCK_WS_INPUT_FRAMES_PER_SECOND: "1000000" }, "runner-agent": runnerEnv } });
  const nc = await connect({ servers: stack.nats.url });
  const watch = await runningWatch(nc);
  // The pool refills after each take (a uid, directories, a network, a PTY running the launch chain): on 2 cores that work
  // would land in the next measurement. A user whose creates are not back to back finds the pool full, as each measurement here does.
  const settled = () => untilWarmPoolFull(stack, opts.warmPool ?? 0);
  try {
    const { ms: createMs, runnerMs, starts } = await createSamples(stack, nc, watch, opts.samples, settled);
    if (opts.createsOnly) return { createMs, runnerMs, starts, echoMs: [], outputMBs: Number.NaN };
    const echoMs = await echoOf(stack, watch, opts.echoSamples, settled);
    const outputMBs = await outputOf(stack, watch, opts.megabytes, settled);
    return { createMs, runnerMs, starts, echoMs, outputMBs };
  } finally {
    watch.stop();
    await nc.drain();
    await stopStackKeepingData(stack);
  }
}

/** Resolves once the runner's warm pool holds size ready sandboxes (its paddock_sandbox_warm_ready gauge); at once for no pool. */
async function untilWarmPoolFull(stack: Stack, size: number): Promise<void> {
  if (size === 0) return;
  const deadline = performance.now() + 60_000;
  for (;;) {
    const text = await (await fetch(`http://127.0.0.1:${String(stack.runners[0]?.ready.opsPort)}/metrics`)).text();
    if (Number(/^paddock_sandbox_warm_ready (\d+)/m.exec(text)?.[1] ?? 0) >= size) return;
    if (performance.now() > deadline) throw new Error("the runner's warm pool did not fill within 60 s");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** The runner's app starts so far by how they started (its /metrics; zero on the process backend, which counts none). */
async function appStarts(stack: Stack): Promise<{ warm: number; cold: number }> {
  const text = await (await fetch(`http://127.0.0.1:${String(stack.runners[0]?.ready.opsPort)}/metrics`)).text();
  const count = (start: string) => Number(new RegExp(`^paddock_sandbox_app_starts_total\\{start="${start}"\\} (\\d+)`, "m").exec(text)?.[1] ?? 0);
  return { warm: count("warm"), cold: count("cold") };
}

async function deleteSession(stack: Stack, id: string): Promise<void> {
  await fetch(`${stack.url}/v1/sessions/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.token}` } });
}

/**
 * POST → record running, one at a time on an idle system as in the terminal
 * bench: each starts once the previous session's sandbox is gone (its
 * destroyed fact), so no teardown is timed into the next create. On bwrap
 * that also leaves the warm pool the time to start the next sandbox, as for a
 * user whose creates are not back to back (a burst beyond the pool's size
 * starts cold). The stage log says where the time goes.
 */
async function createSamples(stack: Stack, nc: NatsConnection, watch: RunningWatch, samples: number, settled: () => Promise<void>): Promise<{ ms: number[]; runnerMs: number[]; starts: { warm: number; cold: number } }> {
  const ms: number[] = [];
  const clock = await stageClock(nc);
  const timed: Array<{ id: string; start: number }> = [];
  let before = { warm: 0, cold: 0 };
  // One untimed create first: the runner's first session pays for cold code paths on either backend.
  for (let i = 0; i <= samples; i++) {
    await settled();
    const start = performance.now();
    const s = await post(stack, "/v1/sessions", { spec: { cmd: ["sh", "-c", "echo up; exec sleep 600"] } });
    clock.mark(s.id, "answered");
    await watch.untilRunning(s.id);
    clock.mark(s.id, "running");
    if (i > 0) {
      ms.push(performance.now() - start);
      timed.push({ id: s.id, start });
    }
    await deleteSession(stack, s.id);
    await clock.destroyed(s.id);
    if (i === 0) before = await appStarts(stack);
  }
  const runnerMs = clock.report(timed);
  const after = await appStarts(stack);
  return { ms, runnerMs, starts: { warm: after.warm - before.warm, cold: after.cold - before.cold } };
}

async function echoOf(stack: Stack, watch: RunningWatch, samples: number, settled: () => Promise<void>): Promise<number[]> {
  await settled();
  const s = await post(stack, "/v1/sessions", { spec: { cmd: ["cat"] } });
  await watch.untilRunning(s.id);
  // Its refill (bwrap) done before the first sample.
  await settled();
  const ws = await openWs(`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?mode=controller&since=all`, { authorization: `Bearer ${stack.token}` });
  const out = await echoSamples(ws, samples, true);
  ws.close();
  await deleteSession(stack, s.id);
  return out;
}

/**
 * The session's output rate once it runs: it waits for a line before it
 * writes, so neither its start nor (bwrap) its pool's refill is in the time.
 */
async function outputOf(stack: Stack, watch: RunningWatch, megabytes: number, settled: () => Promise<void>): Promise<number> {
  await settled();
  const cmd = ["sh", "-c", `read go; head -c ${megabytes * 1024 * 1024} /dev/zero | tr '\\0' 'x' | fold -w 100`];
  const s = await post(stack, "/v1/sessions", { spec: { cmd } });
  const ws = await openWs(`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?mode=controller&since=all`, { authorization: `Bearer ${stack.token}` });
  await watch.untilRunning(s.id);
  await settled();
  const live = drain(ws, true);
  ws.send(Buffer.from("go\n"), { binary: true });
  const out = await live;
  await deleteSession(stack, s.id);
  return out.bytes / 1e6 / out.seconds;
}

/** A bare `bwrap` spawn (read-only /, no namespaces beyond its own) of /bin/true: the baseline the sandbox's overhead is set against. */
async function bareBwrapMs(samples: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < samples; i++) {
    const start = performance.now();
    await new Promise<void>((resolve, reject) => {
      const child = spawn("bwrap", ["--ro-bind", "/", "/", "--", "/bin/true"], { stdio: "ignore" });
      child.once("error", reject);
      child.once("exit", (code) => (code === 0 ? resolve() : reject(new Error(`bwrap exit ${code}`))));
    });
    out.push(performance.now() - start);
  }
  return out;
}
