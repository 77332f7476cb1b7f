import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { AuditEvent, isTerminal, Streams, Subjects, type Scope, type Session } from "@paddock/contracts";
import { connectBus } from "@paddock/bus";
import { startStack } from "@paddock/testing";
import { createSessions, recorderDrain } from "./audit-drain.ts";
import { ackedPublishesPerSec, kvCasOpsPerSec } from "./baselines.ts";
import { cpuMeter, cpuSeconds, profiledServiceEnv } from "./cpu.ts";
import { rssMb } from "./memory.ts";
import { startSimulatedRunner } from "./sim-runner.ts";
import { figure, percentile, type Figure } from "./stats.ts";
import { stopStackKeepingData } from "./leftovers.ts";

const scope: Scope = { workspaceId: "bench", actor: { id: "bench", kind: "user" } };

/**
 * Benchmarks 1 and 6: sessions reaching running per second against simulated
 * runners, with KV CAS and acked publishes on the same server as baselines;
 * and the audit lag (commit → AUDIT) and recorder rate under that load.
 */
export async function lifecycleBench(opts: { sessions: number; runners: number }): Promise<Figure[]> {
  // PADDOCK_BENCH_PROFILE_DIR=DIR writes V8 CPU profiles of the control-plane services there.
  const prof = profiledServiceEnv();
  const stack = await startStack({
    validateOutgoing: false,
    runners: 0,
    env: { scheduler: { ...prof, PADDOCK_MAX_SESSIONS_PER_WORKSPACE: String(opts.sessions * 3), PADDOCK_MAX_SESSIONS_PER_USER: String(opts.sessions * 3) }, "event-recorder": prof, gateway: prof },
  });
  // The simulated runners and clients in this process run as the services do when deployed: unchecked.
  const nc = await connectBus({ servers: stack.nats.url, name: "bench", validateOutgoing: false });
  try {
    const log = (m: string) => process.stderr.write(`[bench] ${m}\n`);
    log("baselines");
    const casOps = Math.min(20_000, opts.sessions * 2);
    const natsBefore = cpuSeconds(stack.nats.process.pid);
    const casPerSec = await kvCasOpsPerSec(nc, casOps);
    const natsCas = cpuSeconds(stack.nats.process.pid);
    const pubPerSec = await ackedPublishesPerSec(nc, Math.min(50_000, opts.sessions * 4));
    const natsPerCasMs = ((natsCas - natsBefore) / casOps) * 1000;
    log("simulated runners");
    // Room for the sessions of benchmark 1 and of the recorder's backlog (all stay running).
    const drainSessions = Math.min(5_000, opts.sessions);
    const perRunner = Math.ceil((opts.sessions + drainSessions) / opts.runners) + 1;
    const startsAt = new Map<string, number>();
    const runners = await Promise.all(Array.from({ length: opts.runners }, (_, i) => startSimulatedRunner(nc, `sim-${i}`, perRunner, startsAt)));

    const kv = await new Kvm(nc).open("sessions");
    const watch = await kv.watch({ key: "bench.>" });
    let running = 0;
    // Waiters on a count of sessions running (resolved by the watch below).
    const waiters: Array<{ target: number; resolve: () => void }> = [];
    const untilRunning = (count: number) => new Promise<void>((resolve) => waiters.push({ target: running + count, resolve }));
    const allRunning = untilRunning(opts.sessions);
    // Where a session's time goes: queued → placed (creating) → running, from its own revisions.
    const stages = { placeMs: [] as number[], startMs: [] as number[], dispatchMs: [] as number[], factMs: [] as number[] };
    const placedAt = new Map<string, number>();
    // A session that ends during the run (e.g. its runner declared lost) would make the figure a lie.
    let ended = 0;
    void (async () => {
      for await (const e of watch) {
        if (e.operation !== "PUT") continue;
        const s = e.json<Session>();
        if (isTerminal(s.state)) ended++;
        if (s.state === "creating") {
          stages.placeMs.push(s.lastFact.at - s.createdAt);
          placedAt.set(s.id, s.lastFact.at);
        }
        if (s.state !== "running") continue;
        stages.startMs.push(s.lastFact.at - s.createdAt);
        const received = startsAt.get(s.id);
        if (received !== undefined) {
          stages.dispatchMs.push(received - (placedAt.get(s.id) ?? received));
          stages.factMs.push(s.lastFact.at - received);
        }
        running++;
        for (const w of waiters) if (w.target === running) w.resolve();
      }
    })();

    const lags: number[] = [];
    let audited = 0;
    const auditStart = performance.now();
    const audit = await (await jetstream(nc).consumers.get(Streams.audit, { filter_subjects: [Subjects.auditWorkspace(scope.workspaceId)], deliver_policy: DeliverPolicy.New })).consume();
    void (async () => {
      for await (const m of audit) {
        const ev = AuditEvent.parse(m.json());
        lags.push(Date.now() - ev.at);
        audited++;
      }
    })();

    const schedulerIdle = rssMb(stack.scheduler.process.pid);
    log("creating");
    const cpu = cpuMeter({ nats: stack.nats.process.pid, scheduler: stack.scheduler.process.pid, recorder: stack.recorder.process.pid, gateway: stack.gateway.process.pid });
    const start = performance.now();
    await createSessions(nc, scope, opts.sessions);
    log(`all created after ${((performance.now() - start) / 1000).toFixed(2)} s`);
    log("waiting for running");
    await allRunning;
    const seconds = (performance.now() - start) / 1000;
    const used = cpu();
    log(`all running; ${used.text}`);
    if (ended > 0) log(`WARNING: ${ended} sessions ended during the run`);
    log(`placed → start received p50 ${percentile(stages.dispatchMs, 50)} ms, p99 ${percentile(stages.dispatchMs, 99)} ms; start received → running p50 ${percentile(stages.factMs, 50)} ms, p99 ${percentile(stages.factMs, 99)} ms`);
    log(`create → placed p50 ${percentile(stages.placeMs, 50)} ms, p99 ${percentile(stages.placeMs, 99)} ms; create → running p50 ${percentile(stages.startMs, 50)} ms, p99 ${percentile(stages.startMs, 99)} ms`);
    const schedulerRss = rssMb(stack.scheduler.process.pid);
    const sessionsPerSec = opts.sessions / seconds;
    const perSession = (name: string) => (used.seconds[name] ?? 0) / opts.sessions;
    // Each session commits create, place and start: wait for their events.
    const expected = opts.sessions * 3;
    while (audited < expected && (performance.now() - auditStart) / 1000 < seconds * 10 + 30) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const auditSeconds = (performance.now() - start) / 1000;
    await audit.close();
    const drained = await recorderDrain(stack, nc, { scope, sessions: drainSessions, untilRunning, env: { ...prof }, log });
    watch.stop();
    for (const r of runners) await r.stop();
    return [
      figure({ bench: "1 lifecycle", metric: `${opts.sessions} sessions → running, ${opts.runners} sim runners`, value: sessionsPerSec, unit: "sessions/s", baseline: { name: "KV CAS", value: casPerSec, unit: "ops/s" }, goal: "≥ 1,000 sessions/s", met: sessionsPerSec >= 1000 }),
      figure({ bench: "1 lifecycle", metric: "same run", value: sessionsPerSec, unit: "sessions/s", baseline: { name: "acked publish 256 B", value: pubPerSec, unit: "msgs/s" } }),
      // Where the time goes: CPU the control plane (server, scheduler, recorder, gateway) and the
      // bench's own client spent per session, against the server's CPU for one KV CAS in the baseline.
      figure({ bench: "1 lifecycle", metric: "control-plane CPU per session", value: (perSession("nats") + perSession("scheduler") + perSession("recorder") + perSession("gateway")) * 1000, unit: "ms", baseline: { name: "nats-server CPU per KV CAS", value: natsPerCasMs } }),
      figure({ bench: "1 lifecycle", metric: "nats-server CPU per session", value: perSession("nats") * 1000, unit: "ms", baseline: { name: "nats-server CPU per KV CAS", value: natsPerCasMs } }),
      figure({ bench: "1 lifecycle", metric: "bench client CPU per session (sim runners, watch, audit)", value: perSession("bench") * 1000, unit: "ms" }),
      figure({ bench: "7 memory", metric: `scheduler RSS, ${opts.sessions} live sessions`, value: schedulerRss, unit: "MB", baseline: { name: "scheduler idle", value: schedulerIdle }, goal: "≤ 300 MB (10,000 sessions)", met: schedulerRss <= 300 }),
      figure({ bench: "6 audit", metric: "lag p99 commit → AUDIT", value: percentile(lags, 99), unit: "ms", baseline: { name: "lag p50", value: percentile(lags, 50) }, goal: "p99 ≤ 250 ms", met: percentile(lags, 99) <= 250 }),
      // Under benchmark 1 the recorder can only keep pace with the facts committed (3 per session).
      figure({ bench: "6 audit", metric: `events/s under bench 1 (${audited} events)`, value: audited / auditSeconds, unit: "events/s", baseline: { name: "sessions/s × 3", value: sessionsPerSec * 3 } }),
      figure({ bench: "6 audit", metric: `recorder rate, backlog of ${drained.events} events`, value: drained.eventsPerSec, unit: "events/s", baseline: { name: "acked publish 256 B", value: pubPerSec, unit: "msgs/s" }, goal: "≥ 5,000 events/s", met: drained.eventsPerSec >= 5000 }),
      figure({ bench: "6 audit", metric: "recorder CPU per event (backlog)", value: drained.cpuPerEventMs, unit: "ms" }),
    ];
  } finally {
    await nc.drain();
    await stopStackKeepingData(stack);
  }
}
