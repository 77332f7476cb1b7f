/**
 * Scenario 2, crashes: SIGKILL a random service (scheduler, gateway,
 * recorder, a runner) every few seconds while a session workload runs,
 * restarting it as itself. Afterwards: sessions stuck in a non-terminal
 * state, sessions lost, sessions placed twice in one generation, orphan
 * sandbox processes, audit events missing or duplicated.
 */
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { Buckets, isTerminal, sessionKey, type Session } from "@paddock/contracts";
import { api, kvRevisions, sleep, waitFor } from "./client.ts";
import { checkAudit, checkOrphans, checkPlacedOnce } from "./checks.ts";
import type { Prng } from "./prng.ts";
import { Anomalies, log, percentile, type ScenarioResult } from "./report.ts";
import type { ChaosStack } from "./stack.ts";

export const CRASH_ANOMALIES = [
  "sessions stuck",
  "sessions lost",
  "placed twice in one generation",
  "orphan processes",
  "audit events missing",
  "audit events duplicated",
  "audit events without a committed fact",
  "audit events malformed",
  "services crashed",
] as const;

const WS = "default";

/** The workload's session kinds: ends by itself (one-shot, or exits), or deleted by the client (PTY or piped app). */
const KINDS = {
  oneshot: { body: { spec: { cmd: ["sh", "-c", "echo chaos; sleep 0.3; exit 3"] }, oneShot: true }, deleteAfter: false },
  exits: { body: { spec: { cmd: ["sh", "-c", "sleep 0.5; exit 0"] } }, deleteAfter: false },
  deleted: { body: { spec: { cmd: ["sleep", "3600"] } }, deleteAfter: true },
  piped: { body: { spec: { apps: [{ name: "main", cmd: ["sleep", "3600"], tty: false }] } }, deleteAfter: true },
} as const;
type Kind = keyof typeof KINDS;

/** Retries a call through killed gateways and schedulers until `done` accepts the answer; undefined when it never did. */
async function retrying(call: () => Promise<{ status: number; body: unknown }>, done: (status: number) => boolean, timeoutMs: number): Promise<{ status: number; body: unknown } | undefined> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const res = await call().catch(() => undefined);
    if (res && done(res.status)) return res;
    await sleep(200);
  }
  return undefined;
}

export interface CrashOptions {
  /** Sessions the workload creates at least. */
  sessions: number;
  killEveryMs: number;
  /** The workload goes on (past `sessions`) until at least this many kills happened. */
  minKills: number;
}

export async function crashScenario(stack: ChaosStack, nc: NatsConnection, opts: CrashOptions, prng: Prng): Promise<ScenarioResult> {
  const started = Date.now();
  const crashBase = stack.crashes.length;
  const startFailuresBase = stack.startFailures.length;
  const anomalies = new Anomalies(CRASH_ANOMALIES);
  const acked = new Map<string, Kind>();
  const deletedOk = new Set<string>();
  let unacked = 0;
  let next = 0;
  let finished = false;

  const kills = new Map<string, number>();
  const killCount = () => [...kills.values()].reduce((a, b) => a + b, 0);
  const client = async (p: Prng) => {
    while (next < opts.sessions || killCount() < opts.minKills) {
      const i = next++;
      const kind = p.pick(Object.keys(KINDS) as Kind[]);
      const spec = KINDS[kind];
      // The same idempotency key on every retry: a create the dead gateway or scheduler committed is answered, not repeated.
      const body = { ...spec.body, idempotencyKey: `chaos-${prng.seed}-${i}` };
      const res = await retrying(() => api(stack.url, stack.token, "POST", "/v1/sessions", body, 10_000), (s) => s === 201 || s === 200, 90_000);
      if (!res) {
        unacked += 1;
        continue;
      }
      const id = (res.body as Session).id;
      acked.set(id, kind);
      if (!spec.deleteAfter) continue;
      await sleep(p.int(300, 1500));
      const del = await retrying(() => api(stack.url, stack.token, "DELETE", `/v1/sessions/${id}`, undefined, 10_000), (s) => s === 200 || s === 404, 90_000);
      if (del?.status === 200) deletedOk.add(id);
    }
  };

  // The fault loop: a random victim every few seconds (jittered), killed and restarted as itself.
  const restartMs: number[] = [];
  const restarting = new Set<Promise<void>>();
  const restart = async (victim: string, t0: number) => {
    await stack.startWithRetries(victim);
    restartMs.push(Date.now() - t0);
  };
  const killer = async (p: Prng) => {
    const victims = ["scheduler", "gateway", "event-recorder", ...stack.runnerIds];
    while (!finished) {
      await sleep(Math.round(opts.killEveryMs * (0.5 + p.next())));
      if (finished) break;
      // Any member that is up (one still restarting from an earlier kill is skipped this turn).
      const victim = p.pick(victims);
      if (!stack.isUp(victim)) continue;
      const t0 = Date.now();
      await stack.kill(victim);
      kills.set(victim, (kills.get(victim) ?? 0) + 1);
      const r: Promise<void> = restart(victim, t0).finally(() => restarting.delete(r));
      restarting.add(r);
    }
    await Promise.all([...restarting]);
  };

  const killing = killer(prng.fork());
  const clients = Array.from({ length: 6 }, () => client(prng.fork()));
  let progress = 0;
  const ticker = setInterval(() => {
    if (acked.size - progress >= 100) log("crashes", `${acked.size}/${opts.sessions} sessions acknowledged, ${killCount()} kills`);
    progress = acked.size - (acked.size % 100);
  }, 2_000);
  try {
    await Promise.all(clients);
  } finally {
    finished = true;
    clearInterval(ticker);
    await killing;
  }
  const workloadEnd = Date.now();
  log("crashes", `workload done in ${workloadEnd - started} ms: ${acked.size} acknowledged, ${killCount()} kills`);
  for (const id of stack.members.keys()) if (!stack.isUp(id)) await stack.startMember(id);

  // Sessions committed by a create whose answer was lost (the client gave up): found in KV, deleted too.
  const kv = await new Kvm(nc).open(Buckets.sessions);
  const ours = new Set<string>(acked.keys());
  const revisions = await kvRevisions<Session>(nc, Buckets.sessions);
  for (const r of revisions) if (r.value && r.value.createdAt >= started && !ours.has(r.value.id)) ours.add(r.value.id);
  for (const id of ours) {
    if (acked.has(id)) continue;
    await retrying(() => api(stack.url, stack.token, "DELETE", `/v1/sessions/${id}`), (s) => s === 200 || s === 404, 30_000);
  }

  // Settle: every session ends by itself or was deleted, so each must reach a terminal state.
  const states = async () => {
    const out = new Map<string, Session | undefined>();
    for (const id of ours) {
      const e = await kv.get(sessionKey(WS, id));
      out.set(id, e && e.operation === "PUT" ? e.json<Session>() : undefined);
    }
    return out;
  };
  let final = await states();
  const settleStart = Date.now();
  await waitFor(async () => {
    final = await states();
    return [...final.values()].every((s) => s === undefined || isTerminal(s.state));
  }, 60_000, 1_000);
  const settleMs = Date.now() - settleStart;
  log("crashes", `settled in ${settleMs} ms; checking`);

  const endStates = new Map<string, number>();
  for (const [id, s] of final) {
    if (!s) {
      if (acked.has(id)) anomalies.add("sessions lost", `${id} (${acked.get(id) ?? "?"}) acknowledged, no record${deletedOk.has(id) ? "" : ", never deleted"}`);
      continue;
    }
    endStates.set(s.state, (endStates.get(s.state) ?? 0) + 1);
    if (!isTerminal(s.state)) {
      anomalies.add("sessions stuck", `${id} (${acked.get(id) ?? "unacknowledged"}) ${s.state}${s.pending ? ` pending ${s.pending.op}` : ""} on ${s.runnerId ?? "-"} generation ${s.placementGeneration}, last ${s.lastFact.action} at +${s.lastFact.at - started} ms`);
    }
  }
  await checkPlacedOnce(nc, anomalies, ours);
  const orphans = await checkOrphans(stack, nc, WS, anomalies, 15_000);
  const audit = await checkAudit(nc, anomalies, 60_000);
  for (const c of stack.crashes.slice(crashBase)) anomalies.add("services crashed", `${c.id} exited (${c.code ?? c.signal ?? "?"}) without being killed`);

  const faults = killCount();
  return {
    name: "crashes",
    faults,
    sessions: acked.size,
    anomalies: anomalies.counts,
    details: anomalies.details,
    seconds: (Date.now() - started) / 1000,
    figures: [
      { metric: "kills by victim", value: faults, unit: "", method: [...kills.entries()].map(([k, n]) => `${k}×${n}`).join(" ") },
      { metric: "workload", value: (workloadEnd - started) / 1000, unit: "s", method: `${acked.size} sessions by 6 clients (one-shot, exiting, deleted PTY, deleted piped); a kill every ~${opts.killEveryMs} ms, at least ${opts.minKills}` },
      { metric: "creates never acknowledged", value: unacked, unit: "", method: "gave up after 90 s of retries with one idempotency key" },
      { metric: "unacknowledged but committed", value: ours.size - acked.size, unit: "", method: "records created in the run that no client got an answer for (deleted before the checks)" },
      { metric: "restart p50", value: percentile(restartMs, 50), unit: "ms", method: "SIGKILL → restarted process logged ready" },
      { metric: "starts that exited before ready", value: stack.startFailures.length - startFailuresBase, unit: "", method: stack.startFailures.slice(startFailuresBase, startFailuresBase + 3).join("; ") || "started again, as an orchestrator would" },
      { metric: "settle", value: settleMs, unit: "ms", method: "workload end → every record terminal (KV poll, 1 s)" },
      { metric: "end states", value: [...endStates.values()].reduce((a, b) => a + b, 0), unit: "", method: [...endStates.entries()].map(([k, n]) => `${k}×${n}`).join(" ") },
      {
        metric: "audit compared",
        value: audit.facts,
        unit: "facts",
        method: `retained revisions of sessions+environments vs ${audit.events} AUDIT events (${audit.beyondHistory} older than a record's retained feed history)`,
      },
      { metric: "orphans at the end", value: orphans, unit: "", method: "/proc scan: PADDOCK_SESSION_ID in env, cwd under a runner dir, no live record there" },
    ],
  };
}
