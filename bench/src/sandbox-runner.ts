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
 * the create's path) are timed too. The two stacks run side by side and are
 * measured in turn, round after round (sandbox-sides.ts): a 10% goal between
 * them is not judged across minutes of a shared host's drift. Needs root, as
 * the runner's bwrap backend does.
 */
import { spawn } from "node:child_process";
import { closeSide, createsOn, echoesOn, openSide, outputOn, type Side, type SideFigures } from "./sandbox-sides.ts";
import { figure, percentile, type Figure } from "./stats.ts";

/** The bwrap runner's warm pool (its default). */
const WARM_POOL_SIZE = 2;
/** A bwrap runner's own uids, network names and addresses: clear of the primitive bench's (140,000; 10.212) and the tests'. */
const BWRAP_RUNNER_ENV = {
  PADDOCK_SANDBOX: "bwrap",
  PADDOCK_SANDBOX_WARM_POOL: String(WARM_POOL_SIZE),
  PADDOCK_SANDBOX_UID_FIRST: "141000",
  PADDOCK_SANDBOX_UID_COUNT: "256",
  PADDOCK_SANDBOX_NET_INSTANCE: "bnr",
  PADDOCK_SANDBOX_NET_PREFIX: "10.211",
};

const log = (m: string) => process.stderr.write(`[bench] ${m}\n`);

/** Measurements alternate between the two stacks in this many rounds: drifts of a shared host land on both alike. */
const ROUNDS = 4;

export async function sandboxRunnerBenches(opts: { samples: number; echoSamples: number; megabytes: number }): Promise<Figure[]> {
  const bareBwrap = await bareBwrapMs(opts.samples);
  log(`runners on the process and on the bwrap backend side by side, measured in turn (${ROUNDS} rounds)`);
  const sides: Side[] = [];
  let noPool: Side | undefined;
  try {
    sides.push(await openSide({ PADDOCK_SANDBOX: "process" }, 0));
    sides.push(await openSide(BWRAP_RUNNER_ENV, WARM_POOL_SIZE));
    for (const side of sides) side.beside = sides.filter((other) => other !== side);
    for (let round = 0; round < ROUNDS; round++) for (const side of sides) await createsOn(side, share(opts.samples, round), round === 0);
    for (let round = 0; round < ROUNDS; round++) for (const side of sides) await echoesOn(side, share(opts.echoSamples, round));
    for (let round = 0; round < ROUNDS; round++) for (const side of sides) await outputOn(side, opts.megabytes / ROUNDS);
    for (const side of sides) side.figures.runnerMs = side.clock.report(side.timed);
    log("runner on the bwrap backend without its warm pool (creates only)");
    noPool = await openSide({ ...BWRAP_RUNNER_ENV, PADDOCK_SANDBOX_WARM_POOL: "0" }, 0);
    await createsOn(noPool, opts.samples, true);
    noPool.figures.runnerMs = noPool.clock.report(noPool.timed);
  } finally {
    for (const side of [...sides, ...(noPool ? [noPool] : [])]) await closeSide(side);
  }
  const [proc, bwrap] = sides.map((s) => s.figures) as [SideFigures, SideFigures];
  log(`bwrap: ${bwrap.starts.warm} of ${opts.samples} timed creates started warm (claimed from the pool), ${bwrap.starts.cold} cold`);
  return sandboxFigures(opts, bareBwrap, proc, bwrap, noPool.figures);
}

/** Round's share of n samples (the first rounds take the remainder). */
function share(n: number, round: number): number {
  return Math.floor(n / ROUNDS) + (round < n % ROUNDS ? 1 : 0);
}

const rate = (f: SideFigures) => f.output.bytes / 1e6 / f.output.seconds;

function sandboxFigures(opts: { samples: number; megabytes: number }, bareBwrap: number[], proc: SideFigures, bwrap: SideFigures, noPool: SideFigures): Figure[] {
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
    figure({ bench, metric: `${opts.megabytes} MB output on bwrap`, value: rate(bwrap), unit: "MB/s", baseline: { name: "on process", value: rate(proc) }, goal: "≥ 0.9x process", met: rate(bwrap) >= 0.9 * rate(proc) }),
  ];
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
