// `pnpm chaos [--quick] [--seed N] [--only a,b] [--keep-data]` (`--help` prints the usage): fault injection with real
// processes and a real nats-server. Prints per scenario the faults injected,
// the sessions, every anomaly count (goal: zero) and timing figures with their
// method; writes JSON under bench-results/; exits 1 on any anomaly, 3 on a
// harness error without one (chaos/src/report.ts, runExitCode).
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseScriptArgsOrExit, repoRoot } from "@paddock/testing";
import { CHAOS_SCENARIOS, CHAOS_USAGE, parseChaosArgs, type ChaosScenario } from "./src/args.ts";
import { badInputScenario } from "./src/badinput.ts";
import { brokerScenario } from "./src/broker.ts";
import { crashScenario } from "./src/crashes.ts";
import { freshSeed, Prng } from "./src/prng.ts";
import { ChaosExit, formatResults, log, runExitCode, summaryLine, totalAnomalies, type ScenarioResult } from "./src/report.ts";
import { ChaosStack } from "./src/stack.ts";
import { takeoverScenario } from "./src/takeover.ts";
import { upgradeScenario } from "./src/upgrade.ts";

const args = parseScriptArgsOrExit(CHAOS_USAGE, parseChaosArgs);
const quick = args.quick;
const seed = args.seed ?? freshSeed();
const only = args.only;

/** Sizes: full runs meet the numbers; quick runs keep every scenario and finish in under two minutes. */
const size = quick
  ? { rounds: 3, takeoverSessions: 2, crashSessions: 40, killEveryMs: 2_000, minKills: 5, badInputs: 1_000, broker: { kills: 1, beforeMs: 1_500, downMs: 3_000, afterMs: 1_500 }, upgrade: { printers: 3, clients: 2 } }
  : { rounds: 200, takeoverSessions: 2, crashSessions: 1_000, killEveryMs: 4_000, minKills: 25, badInputs: 12_000, broker: { kills: 3, beforeMs: 3_000, downMs: 5_000, afterMs: 3_000 }, upgrade: { printers: 8, clients: 4 } };

async function main(): Promise<number> {
  process.stderr.write(`[chaos] seed ${seed} (repeat with --seed ${seed})${quick ? ", quick" : ""}\n`);
  const root = new Prng(seed);
  // One generator per scenario, derived in a fixed order, so --only reproduces the same choices.
  const prngs = Object.fromEntries(CHAOS_SCENARIOS.map((s) => [s, root.fork()])) as Record<ChaosScenario, Prng>;
  const results: ScenarioResult[] = [];
  const run = async (name: ChaosScenario, body: () => Promise<ScenarioResult>) => {
    if (!only.has(name)) return;
    const started = Date.now();
    log(name, "starting");
    try {
      results.push(await body());
    } catch (err) {
      const message = err instanceof Error ? (err.stack ?? err.message) : String(err);
      log(name, `HARNESS ERROR (not an anomaly): ${message}`);
      results.push({ name, faults: 0, sessions: 0, anomalies: {}, figures: [], details: [], seconds: (Date.now() - started) / 1000, error: message });
    }
  };

  // Takeovers, bad input and crashes share one single-server stack, in that order: the
  // crashes come last because they restart every process.
  if (only.has("takeovers") || only.has("bad-input") || only.has("crashes")) {
    const stack = await ChaosStack.start({ runners: 2, capacity: 16 });
    log("stack", `up: ${stack.url}, data in ${stack.dataDir}`);
    const nc = await stack.connect();
    try {
      await run("takeovers", () => takeoverScenario(stack, nc, { rounds: size.rounds, sessions: size.takeoverSessions }, prngs.takeovers));
      await run("bad-input", () => badInputScenario(stack, nc, { inputs: size.badInputs, seed }, prngs["bad-input"]));
      await run("crashes", () => crashScenario(stack, nc, { sessions: size.crashSessions, killEveryMs: size.killEveryMs, minKills: size.minKills }, prngs.crashes));
    } finally {
      await nc.close();
      const keep = args.keepData || results.some((r) => totalAnomalies(r) > 0 || r.error);
      await stack.stop({ keepData: keep });
      if (keep) log("stack", `logs and data kept in ${stack.dataDir}`);
    }
  }
  await run("broker", () => brokerScenario({ ...size.broker, keepData: args.keepData }, prngs.broker));
  await run("upgrade", () => upgradeScenario({ ...size.upgrade, drainDeadlineMs: 60_000, keepData: args.keepData }, prngs.upgrade));

  process.stdout.write(`${formatResults(results)}\n`);
  const total = results.reduce((n, r) => n + totalAnomalies(r), 0);
  for (const r of results) for (const d of r.details) process.stdout.write(`  ${r.name}: ${d}\n`);
  const dir = join(repoRoot, "bench-results");
  mkdirSync(dir, { recursive: true });
  const at = new Date().toISOString();
  const file = join(dir, `chaos-${quick ? "quick-" : ""}${at.replace(/[:.]/g, "-")}.json`);
  const harnessErrors = results.filter((r) => r.error !== undefined).length;
  writeFileSync(file, JSON.stringify({ quick, seed, at, anomalies: total, harnessErrors, results }, null, 2));
  process.stdout.write(`seed ${seed}; ${summaryLine(results)}; wrote ${file}\n`);
  return runExitCode(results);
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    // Outside any scenario (the shared stack did not start): the harness, not a finding.
    process.stderr.write(`chaos HARNESS ERROR (not an anomaly): ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(ChaosExit.harnessError);
  },
);
