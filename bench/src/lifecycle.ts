import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { Api, AuditEvent, type Scope, type Session } from "@paddock/contracts";
import { callRpc } from "@paddock/bus";
import { startStack } from "@paddock/testing";
import { ackedPublishesPerSec, kvCasOpsPerSec } from "./baselines.ts";
import { rssMb } from "./memory.ts";
import { startSimulatedRunner } from "./sim-runner.ts";
import { figure, percentile, type Figure } from "./stats.ts";

const scope: Scope = { workspaceId: "bench", actor: { id: "bench", kind: "user" } };

/**
 * Benchmarks 1 and 6: sessions reaching running per second against simulated
 * runners, with KV CAS and acked publishes on the same server as baselines;
 * and the audit lag (commit → AUDIT) and recorder rate under that load.
 */
export async function lifecycleBench(opts: { sessions: number; runners: number }): Promise<Figure[]> {
  const stack = await startStack({
    runners: 0,
    env: { scheduler: { PADDOCK_MAX_SESSIONS_PER_WORKSPACE: String(opts.sessions * 2) } },
  });
  const nc = await connect({ servers: stack.nats.url });
  try {
    const log = (m: string) => process.stderr.write(`[bench] ${m}\n`);
    log("baselines");
    const casPerSec = await kvCasOpsPerSec(nc, Math.min(20_000, opts.sessions * 2));
    const pubPerSec = await ackedPublishesPerSec(nc, Math.min(50_000, opts.sessions * 4));
    log("simulated runners");
    const perRunner = Math.ceil(opts.sessions / opts.runners) + 1;
    const runners = await Promise.all(Array.from({ length: opts.runners }, (_, i) => startSimulatedRunner(nc, `sim-${i}`, perRunner)));

    const kv = await new Kvm(nc).open("sessions");
    const watch = await kv.watch({ key: "bench.>" });
    let running = 0;
    let resolveAll!: () => void;
    const allRunning = new Promise<void>((r) => (resolveAll = r));
    void (async () => {
      for await (const e of watch) {
        if (e.operation === "PUT" && e.json<Session>().state === "running" && ++running === opts.sessions) resolveAll();
      }
    })();

    const lags: number[] = [];
    let audited = 0;
    const auditStart = performance.now();
    const audit = await (await jetstream(nc).consumers.get("AUDIT", { filter_subjects: ["paddock.audit.bench.>"], deliver_policy: DeliverPolicy.New })).consume();
    void (async () => {
      for await (const m of audit) {
        const ev = AuditEvent.parse(m.json());
        lags.push(Date.now() - ev.at);
        audited++;
      }
    })();

    const schedulerIdle = rssMb(stack.scheduler.process.pid);
    log("creating");
    const start = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        while (next < opts.sessions) {
          next++;
          await callRpc(nc, Api.createSession, { scope, body: { spec: { cmd: ["true"] } } }, { timeoutMs: 30_000 });
        }
      }),
    );
    log("waiting for running");
    await allRunning;
    log("all running");
    const seconds = (performance.now() - start) / 1000;
    const schedulerRss = rssMb(stack.scheduler.process.pid);
    const sessionsPerSec = opts.sessions / seconds;
    // Each session commits create, place and start: wait for their events.
    const expected = opts.sessions * 3;
    while (audited < expected && (performance.now() - auditStart) / 1000 < seconds * 10 + 30) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const auditSeconds = (performance.now() - start) / 1000;
    watch.stop();
    await audit.close();
    for (const r of runners) await r.stop();
    return [
      figure({ bench: "1 lifecycle", metric: `${opts.sessions} sessions → running, ${opts.runners} sim runners`, value: sessionsPerSec, unit: "sessions/s", baseline: { name: "KV CAS", value: casPerSec, unit: "ops/s" }, goal: "≥ 1,000 sessions/s", met: sessionsPerSec >= 1000 }),
      figure({ bench: "1 lifecycle", metric: "same run", value: sessionsPerSec, unit: "sessions/s", baseline: { name: "acked publish 256 B", value: pubPerSec, unit: "msgs/s" } }),
      figure({ bench: "7 memory", metric: `scheduler RSS, ${opts.sessions} live sessions`, value: schedulerRss, unit: "MB", baseline: { name: "scheduler idle", value: schedulerIdle }, goal: "≤ 300 MB (10,000 sessions)", met: schedulerRss <= 300 }),
      figure({ bench: "6 audit", metric: "lag p99 commit → AUDIT", value: percentile(lags, 99), unit: "ms", baseline: { name: "lag p50", value: percentile(lags, 50) }, goal: "p99 ≤ 250 ms", met: percentile(lags, 99) <= 250 }),
      figure({ bench: "6 audit", metric: `recorder rate (${audited} events)`, value: audited / auditSeconds, unit: "events/s", baseline: { name: "acked publish 256 B", value: pubPerSec, unit: "msgs/s" }, goal: "≥ 5,000 events/s", met: audited / auditSeconds >= 5000 }),
    ];
  } finally {
    await nc.drain();
    await stack.stop();
  }
}
