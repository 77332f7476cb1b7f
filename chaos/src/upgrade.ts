/**
 * Scenario upgrade (issue #29 item 6): upgrades without downtime. A stack
 * with two of every control-plane service and two runners; a workload runs
 * throughout: sessions printing numbered lines (`seqN`, the counter kept in
 * the workspace so a cold move continues it), and clients creating one-shot
 * sessions, reading them and listing, retrying as the SDK does
 * (upgrade-client.ts). While it runs:
 *  (a) drain the runner holding the most printers: every session it held must
 *      end running on another runner with its terminal log continuous, and
 *      the runner with zero sessions (its record says so); then restart it
 *      (SIGTERM, start again as a new version would) and uncordon it;
 *  (b) restart every control-plane service one at a time: SIGTERM (graceful),
 *      start the replacement, wait until it is ready, next.
 * Counted: API calls failed after retries, terminal discontinuities, sessions
 * not moved or left behind, one-shots that did not end cleanly, crashes.
 */
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { Buckets, HttpApi, isTerminal, occupiesSlot, sessionKey, type Session } from "@paddock/contracts";
import { sleep, untilRecord, waitFor } from "./client.ts";
import type { Prng } from "./prng.ts";
import { Anomalies, log, type Measured, type ScenarioResult } from "./report.ts";
import { ChaosStack } from "./stack.ts";
import { lineContinuity, RetryingClients, termText } from "./upgrade-client.ts";

export const UPGRADE_ANOMALIES = [
  "api calls failed after retries",
  "terminal output lost",
  "sessions not moved off the drained runner",
  "drained runner still holding sessions",
  "printers stopped printing",
  "sessions stuck",
  "sessions ended wrong",
  "services crashed",
] as const;

const WS = "default";
/** The printer: the next number comes from the workspace, so a session restored elsewhere goes on counting. */
const PRINTER = 'n=$(cat .seq 2>/dev/null || echo 0); while :; do n=$((n+1)); echo "seq$n"; echo $n > .seq; sleep 0.1; done';

/**
 * Runner leases of 6 s + 4 s grace, as the broker scenario's (the others use 2 s + 1 s): with eight
 * services on this 2-core VM a runner's event loop was measured lagging 1.4 s, and a 2 s lease then
 * counts it lost (its one-shots end dead). This scenario judges upgrades; takeovers judges liveness.
 * A drained runner's restart (~6 s) also fits within it, so it is not declared lost meanwhile.
 */
const UPGRADE_LEASES = {
  scheduler: { PADDOCK_RUNNER_LEASE_TTL_MS: "6000", PADDOCK_RUNNER_LOST_GRACE_MS: "4000" },
  "runner-agent": { PADDOCK_RUNNER_LEASE_TTL_MS: "6000", PADDOCK_RUNNER_LEASE_RENEW_MS: "500" },
};

export interface UpgradeOptions {
  /** Long-lived sessions printing numbered lines. */
  printers: number;
  /** Concurrent API clients. */
  clients: number;
  /** How long a drain may take before its sessions count as not moved. */
  drainDeadlineMs: number;
  keepData: boolean;
}

export async function upgradeScenario(opts: UpgradeOptions, prng: Prng): Promise<ScenarioResult> {
  const started = Date.now();
  const stack = await ChaosStack.start({ runners: 2, capacity: 16, replicas: { scheduler: 2, recorder: 2, gateway: 2 }, env: UPGRADE_LEASES });
  log("upgrade", `up: gateways ${stack.gatewayUrls.join(", ")}; ${stack.controlPlane.join(", ")}; ${stack.runnerIds.join(", ")}`);
  const nc = await stack.connect();
  const anomalies = new Anomalies(UPGRADE_ANOMALIES);
  const figures: Measured[] = [];
  let keep = opts.keepData;
  try {
    const result = await run(stack, nc, opts, prng, anomalies, figures);
    keep ||= anomalies.total > 0;
    return { name: "upgrade", ...result, anomalies: anomalies.counts, details: anomalies.details, figures, seconds: (Date.now() - started) / 1000 };
  } catch (err) {
    keep = true;
    throw err;
  } finally {
    await nc.close();
    await stack.stop({ keepData: keep });
    if (keep) log("upgrade", `logs and data kept in ${stack.dataDir}`);
  }
}

async function run(stack: ChaosStack, nc: NatsConnection, opts: UpgradeOptions, prng: Prng, anomalies: Anomalies, figures: Measured[]): Promise<{ faults: number; sessions: number }> {
  const t0 = Date.now();
  const crashBase = stack.crashes.length;
  /** Gaps already counted (a moved session's log is checked right after the drain and again at the end). */
  const gapsSeen = new Set<string>();
  const clients = new RetryingClients(stack.gatewayUrls, stack.token);
  const kv = await new Kvm(nc).open(Buckets.sessions);
  const record = async (id: string): Promise<Session | undefined> => {
    const e = await kv.get(sessionKey(WS, id));
    return e && e.operation === "PUT" ? e.json<Session>() : undefined;
  };

  // The printers, running before anything moves.
  const printers: string[] = [];
  for (let i = 0; i < opts.printers; i++) {
    const s = await clients.call("create printer", HttpApi.createSession, { body: { spec: { cmd: ["sh", "-c", PRINTER] }, idempotencyKey: `upgrade-${prng.seed}-printer-${i}` } }, { retry: true });
    if (!s) throw new Error(`printer ${i} could not be created: ${clients.failures.at(-1)?.error ?? "?"}`);
    printers.push(s.id);
  }
  for (const id of printers) if (!(await untilRecord(nc, WS, id, (s) => s.state === "running", 30_000))) throw new Error(`printer ${id} never ran`);

  // The workload: one-shot creates (idempotency key), reads and lists, from every client, until told to stop.
  let stopping = false;
  const oneShots = new Set<string>();
  let nextKey = 0;
  const client = async (p: Prng) => {
    while (!stopping) {
      const key = `upgrade-${prng.seed}-${nextKey++}`;
      const s = await clients.call("create", HttpApi.createSession, { body: { spec: { cmd: ["sh", "-c", "echo ok"] }, oneShot: true, idempotencyKey: key } }, { retry: true });
      if (s) {
        oneShots.add(s.id);
        await clients.call("get", HttpApi.getSession, { params: { id: s.id } });
      }
      if (p.next() < 0.3) await clients.call("list", HttpApi.listSessions, { query: { limit: 20 } });
      // A steady trickle: this 2-core VM also runs eight services; the figure that matters is failures, not throughput.
      await sleep(p.int(300, 700));
    }
  };
  const workload = Promise.all(Array.from({ length: opts.clients }, () => client(prng.fork())));
  let faults = 0;
  try {
    await sleep(1_000);
    faults += await drainAndRestartRunner(stack, nc, clients, printers, record, opts, anomalies, figures, gapsSeen);
    faults += await rollingRestart(stack, figures);
    // A tail of load after the last restart: what the last replacement serves counts too.
    await sleep(1_500);
  } finally {
    stopping = true;
    await workload;
  }

  // Every printer's log: numbered lines without a gap, and still growing.
  let lines = 0;
  let repeats = 0;
  for (const id of printers) {
    // The current placement's log through the API (a call like any other), the whole log from the stream.
    await clients.text("read log", HttpApi.readLog, { params: { id } });
    const c = lineContinuity(await termText(nc, id));
    lines += c.lines;
    repeats += c.repeats;
    for (const g of c.gaps) if (!gapsSeen.has(`${id}: ${g}`)) anomalies.add("terminal output lost", `${id}: ${g}`);
    const grew = await waitFor(async () => lineContinuity(await termText(nc, id)).last > c.last, 10_000, 500);
    if (!grew) anomalies.add("printers stopped printing", `${id}: no line after seq${c.last} (${(await record(id))?.state ?? "no record"})`);
  }
  figures.push({ metric: "terminal lines checked", value: lines, unit: "", method: `${printers.length} sessions printing seqN every 100 ms, read from the TERM stream across placements at the end; ${anomalies.counts["terminal output lost"] ?? 0} discontinuities; ${repeats} lines printed again after a cold move (the counter's last write came before the checkpoint: repeated, never lost)` });

  // Every one-shot ends destroyed with exit 0 (nothing here loses a sandbox).
  await waitFor(async () => {
    for (const id of oneShots) if (!isTerminal((await record(id))?.state ?? "destroyed")) return false;
    return true;
  }, 60_000, 1_000);
  for (const id of oneShots) {
    const s = await record(id);
    if (s && !isTerminal(s.state)) anomalies.add("sessions stuck", `${id} ${s.state} on ${s.runnerId ?? "-"}`);
    else if (s && (s.state !== "destroyed" || s.childExitCode !== 0)) anomalies.add("sessions ended wrong", `${id} ${s.state} (exit ${s.childExitCode ?? "-"}): ${s.error ?? ""}`);
  }
  for (const f of clients.failures) anomalies.add("api calls failed after retries", `${f.label} at +${f.at - t0} ms: ${f.error}`);
  for (const c of stack.crashes.slice(crashBase)) anomalies.add("services crashed", `${c.id} exited (${c.code ?? c.signal ?? "?"}) without being stopped`);
  for (const id of printers) await clients.call("delete printer", HttpApi.deleteSession, { params: { id } });

  figures.push(
    { metric: "API calls made", value: clients.calls, unit: "", method: `${opts.clients} clients (one-shot create with an idempotency key, get, list) + the printers' creates and log reads; the SDK's Transport over ${stack.gatewayUrls.length} gateways round-robin` },
    { metric: "API calls failed after retries", value: clients.failures.length, unit: "", method: "the SDK's retry policy: GETs and keyed creates, on unavailable/rate_limited/connection errors, Retry-After honoured, 4 retries" },
    { metric: "API calls retried, then answered", value: clients.retried, unit: "", method: `failed tries by gateway: ${counts(clients.failedTries)}; by kind: ${counts(clients.failedTryKinds)}` },
    { metric: "longest unavailability a client saw", value: clients.longestUnavailableMs, unit: "ms", method: `a call's first failed try → its answer (${clients.longestUnavailableLabel || "no call failed a try"})` },
    { metric: "one-shot sessions", value: oneShots.size, unit: "", method: "acknowledged creates, each checked to end destroyed with exit 0" },
  );
  return { faults, sessions: printers.length + oneShots.size };
}

const counts = (m: ReadonlyMap<string, number>) => [...m.entries()].map(([k, n]) => `${k}×${n}`).join(" ") || "none";

/** (a): drain the runner with most printers, check where they went and their logs, restart it, uncordon it. */
async function drainAndRestartRunner(
  stack: ChaosStack,
  nc: NatsConnection,
  clients: RetryingClients,
  printers: readonly string[],
  record: (id: string) => Promise<Session | undefined>,
  opts: UpgradeOptions,
  anomalies: Anomalies,
  figures: Measured[],
  gapsSeen: Set<string>,
): Promise<number> {
  const before = new Map<string, Session>();
  for (const id of printers) {
    const s = await record(id);
    if (s) before.set(id, s);
  }
  const count = (runner: string) => [...before.values()].filter((s) => s.runnerId === runner).length;
  const victim = [...stack.runnerIds].sort((a, b) => count(b) - count(a))[0] ?? "runner-1";
  const held = [...before.values()].filter((s) => s.runnerId === victim && occupiesSlot(s.state));
  const logsBefore = new Map<string, number>();
  for (const s of held) logsBefore.set(s.id, lineContinuity(await termText(nc, s.id)).last);
  log("upgrade", `draining ${victim} (${held.length} printers on it)`);
  const t0 = Date.now();
  const drained = await clients.call("drain runner", HttpApi.drainRunner, { params: { id: victim } });
  if (!drained) throw new Error(`drain of ${victim} failed: ${clients.failures.at(-1)?.error ?? "?"}`);
  // Empty: no record places a live session there (creating, running or warm).
  const onVictim = async () => {
    const out: Session[] = [];
    for (const id of printers) {
      const s = await record(id);
      if (s?.runnerId === victim && occupiesSlot(s.state)) out.push(s);
    }
    return out;
  };
  const empty = await waitFor(async () => (await onVictim()).length === 0, opts.drainDeadlineMs, 200);
  const drainMs = Date.now() - t0;
  if (!empty) for (const s of await onVictim()) anomalies.add("drained runner still holding sessions", `${s.id} ${s.state} on ${victim} after ${opts.drainDeadlineMs} ms`);
  const where = new Map<string, number>();
  let movedLines = 0;
  const lastBefore = (id: string) => logsBefore.get(id) ?? 0;
  for (const s of held) {
    const now = await untilRunning(s.id, record);
    if (!now || now.runnerId === victim || now.placementGeneration <= s.placementGeneration) {
      anomalies.add("sessions not moved off the drained runner", `${s.id}: ${now?.state ?? "no record"} on ${now?.runnerId ?? "-"} generation ${now?.placementGeneration ?? "-"}`);
      continue;
    }
    where.set(now.runnerId ?? "-", (where.get(now.runnerId ?? "-") ?? 0) + 1);
    // Its log, once the copy restored elsewhere printed: continuous across the move.
    let c = lineContinuity("");
    const printed = await waitFor(async () => (c = lineContinuity(await termText(nc, s.id))).last > lastBefore(s.id), 10_000, 300);
    if (!printed) anomalies.add("printers stopped printing", `${s.id}: nothing printed after the move`);
    movedLines += c.lines;
    for (const g of c.gaps) {
      gapsSeen.add(`${s.id}: ${g}`);
      anomalies.add("terminal output lost", `${s.id} (moved): ${g}`);
    }
  }
  // Its record says so too (a one-shot placed there just before the drain may still be ending).
  let runner: Awaited<ReturnType<typeof clients.call<typeof HttpApi.getRunner>>>;
  await waitFor(async () => (runner = await clients.call("get runner", HttpApi.getRunner, { params: { id: victim } }))?.capacityUsed === 0, 10_000, 500);
  if (runner?.capacityUsed !== 0) anomalies.add("drained runner still holding sessions", `${victim}'s record counts ${runner?.capacityUsed ?? "?"} sessions after the drain`);
  figures.push({
    metric: "sessions drained",
    value: held.length,
    unit: "",
    method: `from ${victim} in ${drainMs} ms (drain call → no record placing one there); went to ${[...where.entries()].map(([k, n]) => `${k}×${n}`).join(" ") || "nowhere"}; ${victim}'s record then counts ${runner?.capacityUsed ?? "?"}; their logs right after: ${movedLines} lines, ${[...gapsSeen].length} gaps`,
  });

  // The drained runner restarts as a new version would, then takes work again.
  const r0 = Date.now();
  await stopGracefully(stack, victim);
  await stack.startWithRetries(victim);
  const readyMs = Date.now() - r0;
  const uncordoned = await clients.call("uncordon runner", HttpApi.uncordonRunner, { params: { id: victim } });
  if (!uncordoned) throw new Error(`uncordon of ${victim} failed: ${clients.failures.at(-1)?.error ?? "?"}`);
  figures.push({ metric: `restart ${victim}`, value: readyMs, unit: "ms", method: "SIGTERM → exited → started again → logged ready (drained first)" });
  return 2;
}

/** The record once it is running (polled: the resume may still be placing it), or as it stands after 30 s. */
async function untilRunning(id: string, record: (id: string) => Promise<Session | undefined>): Promise<Session | undefined> {
  let s: Session | undefined;
  await waitFor(async () => (s = await record(id))?.state === "running", 30_000, 200);
  return s;
}

/** SIGTERM and wait for the exit (the harness asked: not a crash). */
async function stopGracefully(stack: ChaosStack, id: string): Promise<number> {
  const m = stack.member(id);
  m.expectingExit = true;
  const t0 = Date.now();
  await m.proc?.stop();
  return Date.now() - t0;
}

/** (b): every control-plane member in turn: SIGTERM, wait for its exit, start the replacement, wait until ready. */
async function rollingRestart(stack: ChaosStack, figures: Measured[]): Promise<number> {
  let faults = 0;
  for (const id of stack.controlPlane) {
    const t0 = Date.now();
    const stopMs = await stopGracefully(stack, id);
    await stack.startWithRetries(id);
    faults += 1;
    const readyMs = Date.now() - t0;
    log("upgrade", `restarted ${id}: stopped in ${stopMs} ms, ready ${readyMs} ms after SIGTERM`);
    figures.push({ metric: `restart ${id}`, value: readyMs, unit: "ms", method: `SIGTERM → exited (${stopMs} ms, in-flight work finished) → replacement logged ready` });
  }
  return faults;
}
