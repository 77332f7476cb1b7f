/**
 * Scenario 3, broker: a local 3-node NATS cluster with R3 streams and
 * buckets (PADDOCK_REPLICAS=3); under load, kill -9 the node leading the
 * `sessions` bucket and restart it. Counts acknowledged writes lost (API
 * creates answered 201, KV revisions a watcher saw, terminal lines that
 * reached a reader) and measures, per service, the time from the kill until
 * it makes progress again.
 */
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { Buckets, isTerminal, kvStreamName, sessionKey, Streams, Subjects, type Session } from "@paddock/contracts";
import { api, kvRevisions, readStream, sleep, untilRecord, waitFor } from "./client.ts";
import { checkAudit, checkPlacedOnce } from "./checks.ts";
import type { Prng } from "./prng.ts";
import { Anomalies, log, percentile, type Measured, type ScenarioResult } from "./report.ts";
import { ChaosStack } from "./stack.ts";

export const BROKER_ANOMALIES = [
  "acknowledged writes lost",
  "observed revisions lost",
  "terminal output lost or repeated",
  "services not progressing",
  "500 answers (internal, not 503)",
  "sessions stuck",
  "sessions ended wrong",
  "placed twice in one generation",
  "audit events missing",
  "audit events duplicated",
  "audit events without a committed fact",
  "audit events malformed",
  "services crashed",
] as const;

const WS = "default";
const PROGRESS_DEADLINE_MS = 60_000;
/** How long the cluster may take to serve JetStream again (start, after a restart); past it the run is a harness error. */
const READY_DEADLINE_MS = 90_000;

/** The node index leading a stream's RAFT group (by server name n1..n3). */
async function leaderOf(nc: NatsConnection, stream: string): Promise<number> {
  const info = await (await jetstreamManager(nc)).streams.info(stream);
  const name = info.cluster?.leader ?? "n1";
  return Math.max(0, Number(name.slice(1)) - 1);
}

export interface BrokerOptions {
  kills: number;
  /** Load before each kill, the node's downtime, and load after the last restart. */
  beforeMs: number;
  downMs: number;
  afterMs: number;
  keepData: boolean;
}

/** Whether the scheduler, the recorder and every runner stored a write after `t0` (last message times of their streams). */
async function progressedSince(nc: NatsConnection, runnerIds: string[], t0: number): Promise<boolean> {
  try {
    const jsm = await jetstreamManager(nc);
    for (const stream of [kvStreamName(Buckets.sessions), Streams.audit]) {
      if (Date.parse((await jsm.streams.info(stream)).state.last_ts) <= t0) return false;
    }
    for (const id of runnerIds) {
      const last = await jsm.streams.getMessage(Streams.runner, { last_by_subj: Subjects.runnerEvents("default", id) });
      if ((last?.time.getTime() ?? 0) <= t0) return false;
    }
    return true;
  } catch {
    return false;
  }
}

const BROKER_LEASES = {
  scheduler: { PADDOCK_RUNNER_LEASE_TTL_MS: "6000", PADDOCK_RUNNER_LOST_GRACE_MS: "4000" },
  "runner-agent": { PADDOCK_RUNNER_LEASE_TTL_MS: "6000", PADDOCK_RUNNER_LEASE_RENEW_MS: "500" },
};

export async function brokerScenario(opts: BrokerOptions, prng: Prng): Promise<ScenarioResult> {
  const started = Date.now();
  const anomalies = new Anomalies(BROKER_ANOMALIES);
  // Leases as long as a node's failover and catch-up can stall a runner on this 2-core VM (its event loop was
  // measured held 2 s while a restarted node caught up): this scenario judges the broker, not runner stalls,
  // which the crashes and takeovers scenarios judge with 2 s leases.
  const stack = await ChaosStack.start({ runners: 2, capacity: 32, cluster: true, env: BROKER_LEASES });
  const cluster = stack.cluster;
  if (!cluster) throw new Error("no cluster");
  log("broker", `cluster up: ${stack.natsUrls}`);
  // Faults go only into a cluster that serves JetStream: one meta leader, every stream led and current.
  await cluster.waitForReady(READY_DEADLINE_MS);
  log("broker", "cluster ready (meta leader, every stream led, replicas current)");
  const nc = await stack.connect();
  const figures: Measured[] = [];
  let faults = 0;
  try {
    // A session printing numbered lines throughout: its log must come out whole and in order.
    const chatty = await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "i=0; while :; do echo line$i; i=$((i+1)); sleep 0.05; done"] } });
    if (chatty.status !== 201) throw new Error(`chatty create answered ${chatty.status}`);
    const chattyId = (chatty.body as Session).id;
    await untilRecord(nc, WS, chattyId, (s) => s.state === "running", 30_000);

    // Every revision a watcher is handed has been committed by the stream: none may disappear.
    const observed = new Map<number, string>();
    const kv = await new Kvm(nc).open(Buckets.sessions);
    const watch = await kv.watch();
    void (async () => {
      for await (const e of watch) observed.set(e.revision, e.key);
    })().catch(() => undefined);

    // Load: one-shot sessions from 4 clients; gateway probes every 100 ms.
    const acked = new Map<string, number>();
    const answers = new Map<string, number>();
    const answer = (what: string) => answers.set(what, (answers.get(what) ?? 0) + 1);
    const gatewayOk: number[] = [];
    let stop = false;
    let seq = 0;
    const client = async () => {
      while (!stop) {
        const key = `broker-${prng.seed}-${seq++}`;
        for (let attempt = 0; !stop || attempt === 0; attempt++) {
          const res = await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "echo x"] }, oneShot: true, idempotencyKey: key }, 10_000).catch(() => undefined);
          answer(res ? String(res.status) : "no answer");
          if (res?.status === 500) anomalies.add("500 answers (internal, not 503)", `POST /v1/sessions at +${Date.now() - started} ms: ${JSON.stringify(res.body)}`);
          if (res && (res.status === 201 || res.status === 200)) {
            acked.set((res.body as Session).id, Date.now());
            break;
          }
          await sleep(200);
        }
        await sleep(100);
      }
    };
    const prober = async () => {
      while (!stop) {
        const res = await api(stack.url, stack.token, "GET", `/v1/sessions/${chattyId}`, undefined, 5_000).catch(() => undefined);
        answer(res ? String(res.status) : "no answer");
        if (res?.status === 500) anomalies.add("500 answers (internal, not 503)", `GET /v1/sessions/:id at +${Date.now() - started} ms: ${JSON.stringify(res.body)}`);
        if (res?.status === 200) gatewayOk.push(Date.now());
        await sleep(100);
      }
    };
    const load = [...Array.from({ length: 4 }, client), prober()];

    const killsAt: number[] = [];
    const catchUp: number[] = [];
    for (let k = 1; k <= opts.kills; k++) {
      await sleep(opts.beforeMs);
      await cluster.waitForReady(READY_DEADLINE_MS);
      const victim = await leaderOf(nc, kvStreamName(Buckets.sessions));
      const t0 = Date.now();
      await cluster.kill(victim);
      faults += 1;
      killsAt.push(t0);
      log("broker", `kill ${k}/${opts.kills}: SIGKILL n${victim + 1} (leader of ${kvStreamName(Buckets.sessions)})`);
      await sleep(opts.downMs);
      await cluster.restart(victim);
      const t1 = Date.now();
      // Not ready within the deadline throws: the run is then a harness error, not a finding.
      await cluster.waitForReady(READY_DEADLINE_MS);
      catchUp.push(Date.now() - t1);
      log("broker", `n${victim + 1} restarted; cluster ready after ${Date.now() - t1} ms`);
    }
    await sleep(opts.afterMs);
    // Keep the load on until every service wrote something after the last kill (or the deadline).
    const lastKill = killsAt.at(-1) ?? started;
    await waitFor(async () => (await progressedSince(nc, stack.runnerIds, lastKill)) && gatewayOk.some((t) => t > lastKill), PROGRESS_DEADLINE_MS, 500);
    stop = true;
    await Promise.all(load);
    watch.stop();
    // The checks read every stream: only from a cluster that serves them all.
    await cluster.waitForReady(READY_DEADLINE_MS);
    log("broker", "load stopped, cluster ready; checking");

    // Progress after each kill, per service, from server timestamps of what each wrote.
    const revisions = await kvRevisions<Session>(nc, Buckets.sessions);
    const auditTimes = (await readStream(nc, Streams.audit)).map((m) => m.time);
    const runnerTimes = new Map<string, number[]>();
    for (const id of stack.runnerIds) runnerTimes.set(id, (await readStream(nc, Streams.runner, Subjects.runnerEvents("default", id))).map((m) => m.time));
    const progress: Record<string, number[]> = {
      scheduler: revisions.map((r) => r.time),
      "event-recorder": auditTimes,
      gateway: gatewayOk,
      ...Object.fromEntries(runnerTimes),
    };
    const worst: Record<string, number> = {};
    for (const t0 of killsAt) {
      for (const [service, times] of Object.entries(progress)) {
        const first = times.filter((t) => t > t0).sort((a, b) => a - b)[0];
        const ms = first === undefined ? Number.POSITIVE_INFINITY : first - t0;
        if (ms > PROGRESS_DEADLINE_MS) anomalies.add("services not progressing", `${service} made no progress within ${PROGRESS_DEADLINE_MS} ms of the kill at +${t0 - started} ms`);
        worst[service] = Math.max(worst[service] ?? 0, ms);
      }
    }
    for (const [service, ms] of Object.entries(worst)) {
      figures.push({ metric: `progress again: ${service}`, value: ms, unit: "ms", method: "kill → first write of the service after it (server timestamp; gateway: first 200 of a 100 ms probe), worst over kills" });
    }
    figures.push({
      metric: "API answers under load",
      value: [...answers.values()].reduce((a, b) => a + b, 0),
      unit: "",
      method: [...answers.entries()].map(([k, n]) => `${k}×${n}`).join(" ") + " (creates and probes, whole run)",
    });
    figures.push({
      metric: "restarted node current",
      value: Math.max(...catchUp),
      unit: "ms",
      method: "restart → cluster ready: one meta leader on every node's /jsz, every stream led with its replicas current (200 ms poll), worst over kills",
    });

    // Acknowledged creates: each record exists; every revision the watcher saw is still stored.
    const stored = new Map(revisions.map((r) => [r.revision, r.key]));
    for (const [id, at] of acked) {
      const e = await kv.get(sessionKey(WS, id));
      if (!e || e.operation !== "PUT") anomalies.add("acknowledged writes lost", `session ${id} created (201) at +${at - started} ms has no record`);
    }
    for (const [rev, key] of observed) if (stored.get(rev) !== key) anomalies.add("observed revisions lost", `${key} revision ${rev}`);

    log("broker", "progress and acknowledged writes checked; reading the terminal log");
    // The chatty log: line numbers strictly consecutive.
    const text = await (await fetch(`${stack.url}/v1/sessions/${chattyId}/log`, { headers: { authorization: `Bearer ${stack.token}` } })).text();
    const numbers = [...text.matchAll(/line(\d+)\r?\n/g)].map((m) => Number(m[1]));
    let gaps = 0;
    for (let i = 1; i < numbers.length; i++) {
      const d = (numbers[i] ?? 0) - (numbers[i - 1] ?? 0);
      if (d !== 1) {
        gaps += 1;
        anomalies.add("terminal output lost or repeated", `line${numbers[i - 1] ?? "?"} followed by line${numbers[i] ?? "?"}`, Math.max(1, Math.abs(d - 1)));
      }
    }
    figures.push({ metric: "terminal lines checked", value: numbers.length, unit: "", method: `a session printing a numbered line every 50 ms; ${gaps} discontinuities` });
    const stillWriting = await waitFor(async () => {
      const again = await (await fetch(`${stack.url}/v1/sessions/${chattyId}/log`, { headers: { authorization: `Bearer ${stack.token}` } })).text();
      return again.length > text.length;
    }, 10_000, 500);
    if (!stillWriting) anomalies.add("terminal output lost or repeated", "the chatty session's log stopped growing after the kills");

    log("broker", "terminal log checked; waiting for every acknowledged session to end");
    // Every acknowledged one-shot ends; no placement twice; audit one to one.
    await waitFor(async () => {
      for (const id of acked.keys()) {
        const e = await kv.get(sessionKey(WS, id));
        if (e && e.operation === "PUT" && !isTerminal(e.json<Session>().state)) return false;
      }
      return true;
    }, 60_000, 1_000);
    for (const id of acked.keys()) {
      const e = await kv.get(sessionKey(WS, id));
      const s = e && e.operation === "PUT" ? e.json<Session>() : undefined;
      if (s && !isTerminal(s.state)) anomalies.add("sessions stuck", `${id} ${s.state} on ${s.runnerId ?? "-"}`);
      // Nothing here loses a runner or its sandbox: every one-shot echo runs and exits 0.
      else if (s && (s.state !== "destroyed" || s.childExitCode !== 0)) anomalies.add("sessions ended wrong", `${id} ${s.state} (exit ${s.childExitCode ?? "-"}): ${s.error ?? ""}`);
    }
    // How long an acknowledged one-shot took to end (its first terminal revision), for those acknowledged around the kills.
    const endedAt = new Map<string, number>();
    const finalRevisions = await kvRevisions<Session>(nc, Buckets.sessions);
    for (const r of finalRevisions) {
      if (r.value && isTerminal(r.value.state) && !endedAt.has(r.value.id)) endedAt.set(r.value.id, r.time);
    }
    const lifetimes = [...acked].flatMap(([id, at]) => {
      const end = endedAt.get(id);
      return end === undefined ? [] : [end - at];
    });
    // The slowest one's revisions (state@ms after its 201, runner, generation): where recovery waited.
    const slowest = [...acked].reduce<[string, number] | undefined>((worst, [id, at]) => {
      const took = (endedAt.get(id) ?? at) - at;
      return worst === undefined || took > worst[1] ? [id, took] : worst;
    }, undefined);
    if (slowest) {
      const ackedAt = acked.get(slowest[0]) ?? 0;
      const trail = finalRevisions.filter((r) => r.value?.id === slowest[0]).map((r) => `${r.value?.state}@${r.time - ackedAt}ms/${r.value?.runnerId ?? "-"}/g${r.value?.placementGeneration}`);
      log("broker", `slowest acknowledged session ${slowest[0]} (${slowest[1]} ms): ${trail.join(" → ")}`);
    }
    figures.push({ metric: "create → end p50", value: percentile(lifetimes, 50), unit: "ms", method: "acknowledged one-shot (echo): 201 → first terminal revision (server time)" });
    figures.push({ metric: "create → end max", value: Math.max(...lifetimes), unit: "ms", method: "the slowest one, whole run (recovery after the kills included)" });
    log("broker", "sessions settled; checking placements and audit");
    await checkPlacedOnce(nc, anomalies);
    await checkAudit(nc, anomalies, 60_000);
    for (const c of stack.crashes) anomalies.add("services crashed", `${c.id} exited (${c.code ?? c.signal ?? "?"})`);
    figures.push({ metric: "starts that exited before ready", value: stack.startFailures.length, unit: "", method: stack.startFailures.slice(0, 3).join("; ") || "started again, as an orchestrator would" });
    figures.unshift({ metric: "acknowledged creates", value: acked.size, unit: "", method: `4 clients, one-shot sessions, R3 streams and buckets; ${observed.size} revisions watched` });
    return {
      name: "broker",
      faults,
      sessions: acked.size + 1,
      anomalies: anomalies.counts,
      details: anomalies.details,
      seconds: (Date.now() - started) / 1000,
      figures,
    };
  } finally {
    await nc.close();
    const keep = opts.keepData || anomalies.total > 0;
    await stack.stop({ keepData: keep });
    if (keep) log("broker", `logs kept in ${stack.dataDir}`);
  }
}
