import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { Api, Streams, Subjects, type Scope } from "@paddock/contracts";
import { callRpc } from "@paddock/bus";
import { startService, type Stack } from "@paddock/testing";
import { cpuMeter } from "./cpu.ts";

/**
 * Creates the bench keeps in flight. More (256) finishes creating sooner but
 * no more sessions reach running per second: the system is then CPU bound and
 * only queues grow.
 */
const CREATES_IN_FLIGHT = 64;

/** Creates `sessions` sessions, CREATES_IN_FLIGHT at a time, and resolves once all have been answered. */
export async function createSessions(nc: NatsConnection, scope: Scope, sessions: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: CREATES_IN_FLIGHT }, async () => {
      while (next < sessions) {
        next++;
        await callRpc(nc, Api.createSession, { scope, body: { spec: { cmd: ["true"] } } }, { timeoutMs: 30_000 });
      }
    }),
  );
}

/**
 * The recorder's own rate (benchmark 6): under benchmark 1 it can only keep
 * pace with the sessions committed, so its capacity is measured on a backlog.
 * The recorder is stopped, `sessions` sessions are created and reach running
 * (3 facts each), and a fresh recorder process drains the change feed; the
 * rate is events over the time from the first backlog event in AUDIT to the
 * last (process boot excluded).
 */
export async function recorderDrain(
  stack: Stack,
  nc: NatsConnection,
  opts: {
    scope: Scope;
    sessions: number;
    /** Resolves once `count` more sessions than now have reached running. */
    untilRunning: (count: number) => Promise<void>;
    env: Record<string, string>;
    log: (m: string) => void;
  },
): Promise<{ eventsPerSec: number; events: number; cpuPerEventMs: number }> {
  await stack.recorder.stop();
  const running = opts.untilRunning(opts.sessions);
  await createSessions(nc, opts.scope, opts.sessions);
  await running;
  const expected = opts.sessions * 3;
  const audit = await (await jetstream(nc).consumers.get(Streams.audit, { filter_subjects: [Subjects.auditWorkspace(opts.scope.workspaceId)], deliver_policy: DeliverPolicy.New })).consume();
  let first = 0;
  let last = 0;
  let seen = 0;
  let resolveAll!: () => void;
  const allSeen = new Promise<void>((r) => (resolveAll = r));
  void (async () => {
    for await (const _m of audit) {
      last = performance.now();
      if (seen++ === 0) first = last;
      if (seen === expected) resolveAll();
    }
  })();
  opts.log(`recorder drain: ${expected} events backlogged; starting a fresh recorder`);
  const recorder = await startService("event-recorder", { ...stack.commonEnv, ...opts.env });
  const cpu = cpuMeter({ recorder: recorder.process.pid });
  try {
    await allSeen;
    const used = cpu();
    opts.log(`recorder drain: ${used.text}`);
    return { eventsPerSec: (seen - 1) / ((last - first) / 1000), events: seen, cpuPerEventMs: ((used.seconds.recorder ?? 0) / seen) * 1000 };
  } finally {
    await audit.close();
    await recorder.stop();
  }
}
