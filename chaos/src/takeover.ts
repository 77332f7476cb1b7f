/**
 * Scenario 1, takeovers: SIGSTOP the runner holding the sessions until its
 * lease is gone and they resume elsewhere from a checkpoint, then SIGCONT it.
 * Counts stale bytes a client saw live or on replay, stale transitions
 * applied, and stale controller input delivered — to a superseded copy, or
 * from a superseded controller.
 */
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { Buckets, runnerKey, type Runner, type Session } from "@paddock/contracts";
import { api, kvRevisions, sleep, Terminal, untilRecord, waitFor, type OutputFrame } from "./client.ts";
import { sandboxProcesses } from "./checks.ts";
import { incarnationScript, readObservations, staleOutput, startsOf } from "./markers.ts";
import type { Prng } from "./prng.ts";
import { Anomalies, log, percentile, type ScenarioResult } from "./report.ts";
import type { ChaosStack } from "./stack.ts";

const WS = "default";
/** A controller that should see no output (it only types): start past any cursor. */
const NO_REPLAY = "since=999999999999999";

export const TAKEOVER_ANOMALIES = [
  "stale bytes seen live",
  "stale bytes on replay (websocket)",
  "stale bytes on replay (log)",
  "stale transitions applied",
  "stale input delivered to the old copy (typed while it was stopped)",
  "stale input delivered to the old copy (typed after the takeover)",
  "input from a superseded controller delivered",
  "not resumed elsewhere",
  "resumed without the latest checkpoint",
  "old copy not torn down",
  "controller input not delivered",
  "services crashed",
] as const;

interface Tracked {
  id: string;
  viewer: Terminal;
  tag: string | undefined;
}

export async function takeoverScenario(stack: ChaosStack, nc: NatsConnection, opts: { rounds: number; sessions: number }, prng: Prng): Promise<ScenarioResult> {
  const started = Date.now();
  const crashBase = stack.crashes.length;
  const anomalies = new Anomalies(TAKEOVER_ANOMALIES);
  const obsDir = stack.obsDir;
  const takeoverMs: number[] = [];
  const rereg: number[] = [];
  let faults = 0;
  const metricsBefore = await fencingMetrics(stack);

  const tracked: Tracked[] = [];
  for (let i = 0; i < opts.sessions; i++) {
    const res = await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", incarnationScript(obsDir)] } });
    if (res.status !== 201) throw new Error(`create answered ${res.status}: ${JSON.stringify(res.body)}`);
    const id = (res.body as Session).id;
    await untilRecord(nc, WS, id, (s) => s.state === "running", 30_000);
    tracked.push({ id, viewer: await Terminal.open(stack.url, stack.token, id, "since=all"), tag: undefined });
  }
  for (const t of tracked) {
    await t.viewer.until((v) => /@\d+-\d+@/.test(v.text()), 10_000);
    t.tag = readObservations(obsDir, t.id).starts.at(-1);
  }

  const runnersKv = await new Kvm(nc).open(Buckets.runners);
  // A runner left stopped would poison every later scenario on this stack: always continue it.
  let stopped: string | undefined;
  try {
    for (let round = 1; round <= opts.rounds; round++) {
      const records = await Promise.all(tracked.map(async (t) => ({ t, s: (await api(stack.url, stack.token, "GET", `/v1/sessions/${t.id}`)).body as Session })));
      const byRunner = new Map<string, typeof records>();
      for (const r of records) if (r.s.state === "running" && r.s.runnerId) byRunner.set(r.s.runnerId, [...(byRunner.get(r.s.runnerId) ?? []), r]);
      // The runner holding the most of them (a seeded pick among equals).
      const most = Math.max(0, ...[...byRunner.values()].map((v) => v.length));
      const candidates = [...byRunner.entries()].filter(([, v]) => v.length === most);
      const [victim, moving] = candidates.length > 0 ? prng.pick(candidates) : [undefined, []];
      if (!victim || moving.length === 0) throw new Error(`round ${round}: no running session to take over (${records.map((r) => r.s.state).join(",")})`);
      const before = (await runnersKv.get(runnerKey("default", victim)))?.json<Runner>();

      // A fresh checkpoint of each moving session, so the resume restores the current incarnation count.
      const snapshotted = new Set<string>();
      for (const { t } of moving) {
        const snap = await api(stack.url, stack.token, "POST", `/v1/sessions/${t.id}/snapshot`);
        if (snap.status === 200) snapshotted.add(t.id);
        else log("takeovers", `round ${round}: snapshot of ${t.id} answered ${snap.status}`);
      }
      // The current controller types; its input must reach the current copy.
      const c1 = await Promise.all(moving.map(({ t }) => Terminal.open(stack.url, stack.token, t.id, `mode=controller&${NO_REPLAY}`)));
      await typeAndConfirm(c1, moving.map(({ t }) => t.id), `r${round}a`, obsDir, anomalies);

      const t0 = Date.now();
      stack.signal(victim, "SIGSTOP");
      stopped = victim;
      faults += 1;
      // Keys typed while the runner is stopped (the session is still placed there until it is declared lost).
      let j = 0;
      const typing = setInterval(() => {
        for (const c of c1) c.send(`r${round}s${j}\r`, true);
        j += 1;
      }, 150);
      try {
        await Promise.all(
          moving.map(async ({ t, s }) => {
            const moved = await untilRecord(nc, WS, t.id, (x) => x.state === "running" && x.placementGeneration > s.placementGeneration && x.runnerId !== victim, 60_000);
            if (!moved) return anomalies.add("not resumed elsewhere", `round ${round} session ${t.id} (was on ${victim} generation ${s.placementGeneration})`);
            takeoverMs.push(Date.now() - t0);
            const oldTag = t.tag;
            const fresh = await waitFor(() => newTag(obsDir, t.id, oldTag) !== undefined, 20_000, 50);
            const tag = newTag(obsDir, t.id, oldTag);
            if (!fresh || !tag) return anomalies.add("not resumed elsewhere", `round ${round} session ${t.id}: the new copy never started`);
            if (snapshotted.has(t.id) && oldTag && startsOf(tag) !== startsOf(oldTag) + 1) {
              anomalies.add("resumed without the latest checkpoint", `round ${round} session ${t.id}: ${oldTag} → ${tag}`);
            }
            t.tag = tag;
          }),
        );
      } finally {
        clearInterval(typing);
      }

      // A newer controller supersedes the first; whatever the first sends after the newer one's hello must be dropped.
      const c2 = await Promise.all(moving.map(({ t }) => Terminal.open(stack.url, stack.token, t.id, `mode=controller&${NO_REPLAY}`)));
      await Promise.all(c2.map((c) => c.until((x) => x.hello() !== undefined, 5_000)));
      const late: string[] = [];
      for (let k = 0; k < 5; k++) {
        c1.forEach((c, i) => {
          if (c.closeCode !== undefined) return;
          const token = `r${round}l${k}x${i}`;
          c.send(`${token}\r`, true);
          late.push(token);
        });
        await sleep(20);
      }
      await typeAndConfirm(c2, moving.map(({ t }) => t.id), `r${round}n`, obsDir, anomalies);

      // Wake the old runner while the new controller keeps typing: nothing may reach its stale copies.
      stack.signal(victim, "SIGCONT");
      stopped = undefined;
      const t1 = Date.now();
      for (let k = 0; k < 10; k++) {
        for (const c of c2) c.send(`r${round}p${k}\r`, true);
        await sleep(150);
      }
      const reregistered = await waitFor(async () => {
        const r = (await runnersKv.get(runnerKey("default", victim)))?.json<Runner>();
        return r !== undefined && r.state === "active" && r.generation > (before?.generation ?? 0);
      }, 30_000);
      if (reregistered) rereg.push(Date.now() - t1);
      const ids = new Set(moving.map(({ t }) => t.id));
      const torn = await waitFor(() => !sandboxProcesses(stack).some((p) => p.runnerId === victim && ids.has(p.sessionId)), 20_000, 200);
      if (!reregistered || !torn) anomalies.add("old copy not torn down", `round ${round}: ${victim} ${reregistered ? "still runs copies" : "never re-registered"}`);
      for (const c of [...c1, ...c2]) c.close();

      for (const id of ids) {
        for (const input of readObservations(obsDir, id).inputs) {
          if (!input.token.startsWith(`r${round}`)) continue;
          if (late.includes(input.token)) anomalies.add("input from a superseded controller delivered", `round ${round} session ${id}: ${input.token} reached ${input.tag}`);
          else if (input.tag !== input.latest) {
            const typedWhileStopped = input.token.startsWith(`r${round}s`) || input.token.startsWith(`r${round}a`);
            anomalies.add(
              `stale input delivered to the old copy (${typedWhileStopped ? "typed while it was stopped" : "typed after the takeover"})`,
              `round ${round} session ${id}: ${input.token} reached ${input.tag} after ${input.latest ?? "?"} started`,
            );
          }
        }
      }
      log("takeovers", `round ${round}/${opts.rounds}: ${moving.length} session(s) moved off ${victim} in ${takeoverMs.slice(-moving.length).join(", ")} ms`);
    }
  } finally {
    if (stopped) stack.signal(stopped, "SIGCONT");
  }

  // Live: each viewer was attached from the first incarnation through every takeover.
  for (const t of tracked) {
    const live = staleOutput(t.viewer.output);
    anomalies.add("stale bytes seen live", `session ${t.id}: ${live.staleFrames} frame(s), ${live.first ?? ""}`, live.staleBytes);
    t.viewer.close();
  }
  // Replay: the whole log, over the WebSocket and over GET /log.
  for (const t of tracked) {
    const replay = await Terminal.open(stack.url, stack.token, t.id, "since=all");
    await replay.until((x) => x.hello() !== undefined, 5_000);
    const last = Number(replay.hello()?.cursor ?? 0);
    await replay.until((x) => (x.output.at(-1)?.cursor ?? 0) >= last, 30_000);
    const ws = staleOutput(replay.output.filter((f) => f.cursor <= last));
    anomalies.add("stale bytes on replay (websocket)", `session ${t.id}: ${ws.staleFrames} frame(s), ${ws.first ?? ""}`, ws.staleBytes);
    replay.close();
    const res = await fetch(`${stack.url}/v1/sessions/${t.id}/log`, { headers: { authorization: `Bearer ${stack.token}` } });
    const lines: OutputFrame[] = Buffer.from(await res.arrayBuffer())
      .toString("latin1")
      .split(/(?<=\n)/)
      .map((text) => ({ cursor: 0, bytes: text.length, text, at: 0 }));
    const logged = staleOutput(lines);
    anomalies.add("stale bytes on replay (log)", `session ${t.id}: ${logged.staleFrames} line(s), ${logged.first ?? ""}`, logged.staleBytes);
  }
  await staleTransitions(nc, new Set(tracked.map((t) => t.id)), new Set(stack.runnerIds), anomalies);
  for (const t of tracked) await api(stack.url, stack.token, "DELETE", `/v1/sessions/${t.id}`);
  // A delete is answered before the runner's teardown report (the last
  // generation's usage) lands on the record; the next scenario on this stack
  // compares state before and after its own inputs, so wait for that write.
  for (const t of tracked) {
    const settled = await untilRecord(nc, WS, t.id, (s) => s.state === "destroyed" && (s.usageGeneration ?? 0) >= s.placementGeneration, 30_000);
    if (!settled) log("takeovers", `session ${t.id}: no teardown usage on the record 30 s after its delete`);
  }
  for (const c of stack.crashes.slice(crashBase)) anomalies.add("services crashed", `${c.id} exited (${c.code ?? c.signal ?? "?"})`);

  const after = await fencingMetrics(stack);
  return {
    name: "takeovers",
    faults,
    sessions: tracked.length,
    anomalies: anomalies.counts,
    details: anomalies.details,
    seconds: (Date.now() - started) / 1000,
    figures: [
      { metric: "rounds", value: opts.rounds, unit: "", method: `SIGSTOP of the runner holding ${opts.sessions} session(s), resume elsewhere, SIGCONT` },
      { metric: "session moves", value: takeoverMs.length, unit: "" },
      {
        metric: "takeover p50",
        value: percentile(takeoverMs, 50),
        unit: "ms",
        method: "SIGSTOP → record running on another runner (KV watch); lease TTL 2 s + grace 1 s",
      },
      { metric: "takeover max", value: Math.max(...takeoverMs), unit: "ms" },
      { metric: "re-registration p50", value: percentile(rereg, 50), unit: "ms", method: "SIGCONT → runner record active at a new generation (KV poll, 100 ms)" },
      { metric: "stale facts fenced", value: after.staleFacts - metricsBefore.staleFacts, unit: "", method: "scheduler paddock_stale_facts_total delta (dropped, as designed)" },
      { metric: "terminal writers fenced", value: after.termFenced - metricsBefore.termFenced, unit: "", method: "runners' paddock_term_fenced_total delta" },
      { metric: "stale input dropped", value: after.staleInput - metricsBefore.staleInput, unit: "", method: "runners' paddock_stale_input_total delta" },
    ],
  };
}

/** The tag of an incarnation that started after `old`, from the observation file. */
function newTag(obsDir: string, id: string, old: string | undefined): string | undefined {
  const starts = readObservations(obsDir, id).starts;
  const last = starts.at(-1);
  return last !== undefined && last !== old ? last : undefined;
}

/** Sends three lines from each controller and waits until each session's current copy recorded them. */
async function typeAndConfirm(controllers: Terminal[], ids: string[], prefix: string, obsDir: string, anomalies: Anomalies): Promise<void> {
  await Promise.all(controllers.map((c) => c.until((x) => x.hello() !== undefined, 5_000)));
  const tokens = [0, 1, 2].map((k) => `${prefix}${k}`);
  for (const token of tokens) for (const c of controllers) c.send(`${token}\r`, true);
  await Promise.all(
    ids.map(async (id) => {
      const got = await waitFor(() => {
        const seen = new Set(readObservations(obsDir, id).inputs.map((i) => i.token));
        return tokens.every((t) => seen.has(t));
      }, 10_000, 50);
      if (!got) anomalies.add("controller input not delivered", `session ${id}: ${tokens.join(",")}`);
    }),
  );
}

/**
 * A stale transition is a revision committed on a runner's word (lastFact
 * actor = that runner) while the record places the session elsewhere: the
 * fact came from a copy that had been superseded.
 */
async function staleTransitions(nc: NatsConnection, ids: ReadonlySet<string>, runners: ReadonlySet<string>, anomalies: Anomalies): Promise<void> {
  for (const r of await kvRevisions<Session>(nc, Buckets.sessions)) {
    const s = r.value;
    if (!s || !ids.has(s.id) || !runners.has(s.lastFact.actorId)) continue;
    if (s.runnerId !== s.lastFact.actorId) {
      anomalies.add("stale transitions applied", `${s.id} revision ${r.revision}: ${s.lastFact.action} by ${s.lastFact.actorId} while placed on ${s.runnerId ?? "none"} (generation ${s.placementGeneration})`);
    }
  }
}

async function fencingMetrics(stack: ChaosStack): Promise<{ staleFacts: number; termFenced: number; staleInput: number }> {
  let termFenced = 0;
  let staleInput = 0;
  for (const id of stack.runnerIds) {
    termFenced += (await stack.metric(id, "paddock_term_fenced_total")) ?? 0;
    staleInput += (await stack.metric(id, "paddock_stale_input_total")) ?? 0;
  }
  return { staleFacts: (await stack.metric("scheduler", "paddock_stale_facts_total")) ?? 0, termFenced, staleInput };
}
