/**
 * The bwrap backend through the runner (issue #23's performance goals): the
 * same create → running, echo and output measurements on a stack whose
 * runner uses the process backend and on one whose runner uses bwrap, in the
 * same run, as ratios bwrap / process. The sandbox's own overhead is the
 * difference of the two create p50s (the process backend's create is a bare
 * PTY spawn plus the control plane), printed beside a bare `bwrap` spawn.
 * Needs root, as the runner's bwrap backend does.
 */
import { spawn } from "node:child_process";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { startStack, type Stack } from "@paddock/testing";
import { stopStackKeepingData } from "./leftovers.ts";
import { figure, percentile, type Figure } from "./stats.ts";
import { drain, echoSamples, openWs, post, runningWatch, stageClock, type RunningWatch } from "./terminal.ts";

/** A bwrap runner's own uids, network names and addresses: clear of the primitive bench's (140,000; 10.212) and the tests'. */
const BWRAP_RUNNER_ENV = {
  PADDOCK_SANDBOX: "bwrap",
  PADDOCK_SANDBOX_UID_FIRST: "141000",
  PADDOCK_SANDBOX_UID_COUNT: "256",
  PADDOCK_SANDBOX_NET_INSTANCE: "bnr",
  PADDOCK_SANDBOX_NET_PREFIX: "10.211",
};

interface BackendFigures {
  createMs: number[];
  echoMs: number[];
  outputMBs: number;
}

const log = (m: string) => process.stderr.write(`[bench] ${m}\n`);

export async function sandboxRunnerBenches(opts: { samples: number; echoSamples: number; megabytes: number }): Promise<Figure[]> {
  const bareBwrap = await bareBwrapMs(opts.samples);
  log("runner on the process backend");
  const proc = await measureBackend({ PADDOCK_SANDBOX: "process" }, opts);
  log("runner on the bwrap backend");
  const bwrap = await measureBackend(BWRAP_RUNNER_ENV, opts);
  const p50 = (s: number[]) => percentile(s, 50);
  const p99 = (s: number[]) => percentile(s, 99);
  const overhead = p50(bwrap.createMs) - p50(proc.createMs);
  const bench = "sandbox runner";
  return [
    figure({ bench, metric: "create→running on bwrap p50", value: p50(bwrap.createMs), unit: "ms", baseline: { name: "on process p50", value: p50(proc.createMs) }, goal: "≤ 30 ms", met: p50(bwrap.createMs) <= 30 }),
    figure({ bench, metric: "create→running on bwrap p99", value: p99(bwrap.createMs), unit: "ms", baseline: { name: "on process p99", value: p99(proc.createMs) }, goal: "≤ 100 ms", met: p99(bwrap.createMs) <= 100 }),
    figure({ bench, metric: "sandbox overhead (bwrap create p50 - process create p50)", value: overhead, unit: "ms", baseline: { name: "bare bwrap spawn p50", value: p50(bareBwrap) }, goal: "≤ 10 ms", met: overhead <= 10 }),
    figure({ bench, metric: "echo on bwrap p50", value: p50(bwrap.echoMs), unit: "ms", baseline: { name: "on process p50", value: p50(proc.echoMs) }, goal: "≤ 1.1x process", met: p50(bwrap.echoMs) <= 1.1 * p50(proc.echoMs) }),
    figure({ bench, metric: "echo on bwrap p99", value: p99(bwrap.echoMs), unit: "ms", baseline: { name: "on process p99", value: p99(proc.echoMs) }, goal: "≤ 1.1x process", met: p99(bwrap.echoMs) <= 1.1 * p99(proc.echoMs) }),
    figure({ bench, metric: `${opts.megabytes} MB output on bwrap`, value: bwrap.outputMBs, unit: "MB/s", baseline: { name: "on process", value: proc.outputMBs }, goal: "≥ 0.9x process", met: bwrap.outputMBs >= 0.9 * proc.outputMBs }),
  ];
}

async function measureBackend(runnerEnv: Record<string, string>, opts: { samples: number; echoSamples: number; megabytes: number }): Promise<BackendFigures> {
  const stack = await startStack({ validateOutgoing: false, runnerCapacity: 64, env: { gateway: { PADDOCK_WS_INPUT_FRAMES_PER_SECOND: "1000000" }, "runner-agent": runnerEnv } });
  const nc = await connect({ servers: stack.nats.url });
  const watch = await runningWatch(nc);
  try {
    const createMs = await createSamples(stack, nc, watch, opts.samples);
    const echoMs = await echoOf(stack, watch, opts.echoSamples);
    const outputMBs = await outputOf(stack, opts.megabytes);
    return { createMs, echoMs, outputMBs };
  } finally {
    watch.stop();
    await nc.drain();
    await stopStackKeepingData(stack);
  }
}

async function deleteSession(stack: Stack, id: string): Promise<void> {
  await fetch(`${stack.url}/v1/sessions/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.token}` } });
}

/**
 * POST → record running, one at a time on an idle system as in the terminal
 * bench: each starts once the previous session's sandbox is gone (its
 * destroyed fact), so no teardown is timed into the next create. The stage
 * log says where the time goes.
 */
async function createSamples(stack: Stack, nc: NatsConnection, watch: RunningWatch, samples: number): Promise<number[]> {
  const ms: number[] = [];
  const clock = await stageClock(nc);
  const timed: Array<{ id: string; start: number }> = [];
  // One untimed create first: the runner's first session pays for cold code paths on either backend.
  for (let i = 0; i <= samples; i++) {
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
  }
  clock.report(timed);
  return ms;
}

async function echoOf(stack: Stack, watch: RunningWatch, samples: number): Promise<number[]> {
  const s = await post(stack, "/v1/sessions", { spec: { cmd: ["cat"] } });
  await watch.untilRunning(s.id);
  const ws = await openWs(`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?mode=controller&since=all`, { authorization: `Bearer ${stack.token}` });
  const out = await echoSamples(ws, samples, true);
  ws.close();
  await deleteSession(stack, s.id);
  return out;
}

async function outputOf(stack: Stack, megabytes: number): Promise<number> {
  const cmd = ["sh", "-c", `head -c ${megabytes * 1024 * 1024} /dev/zero | tr '\\0' 'x' | fold -w 100`];
  const s = await post(stack, "/v1/sessions", { spec: { cmd } });
  const ws = await openWs(`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?since=all`, { authorization: `Bearer ${stack.token}` });
  const live = await drain(ws, true);
  await deleteSession(stack, s.id);
  return live.bytes / 1e6 / live.seconds;
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
