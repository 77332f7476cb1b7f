/**
 * Audit: exactly one event per committed fact, with real processes and a real
 * nats-server. The recorder and the scheduler are SIGKILLed at random points
 * while sessions are created and deleted; two recorder replicas share the
 * feeds; a recorder that was down catches up; no event carries anything but
 * the fixed fields; and the example usage observer counts each event once.
 */
import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { AuditEvent, Buckets, Streams, Subjects, ZERO_USAGE, type Environment, type Session, type Usage } from "@paddock/contracts";
import { startNatsServer, startService, startStack, type NatsServerHandle, type ServiceProcess, type Stack } from "@paddock/testing";
import { startUsageObserver } from "../../examples/usage-observer.ts";
import { api } from "./helpers.ts";

let stack: Stack | undefined;
let nc: NatsConnection | undefined;
let nats: NatsServerHandle | undefined;
const extra: ServiceProcess[] = [];
afterEach(async () => {
  await Promise.all(extra.splice(0).map((s) => s.kill()));
  await nc?.drain().catch(() => undefined);
  await stack?.stop();
  await nats?.stop();
  stack = undefined;
  nc = undefined;
  nats = undefined;
});

const FAST = {
  gateway: { PADDOCK_RPC_TIMEOUT_MS: "1000" },
  scheduler: { PADDOCK_SCHEDULER_TICK_MS: "200" },
};

async function up(runners: number): Promise<{ stack: Stack; nc: NatsConnection }> {
  stack = await startStack({ runners, env: FAST });
  nc = await connect({ servers: stack.nats.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  return { stack, nc };
}

function startRecorder(s: Stack): Promise<ServiceProcess> {
  return startService("event-recorder", { ...s.commonEnv }).then((p) => (extra.push(p), p));
}

function startScheduler(s: Stack): Promise<ServiceProcess> {
  return startService("scheduler", { ...s.commonEnv, ...FAST.scheduler, PADDOCK_SESSION_TOKEN_SECRET: randomBytes(24).toString("hex") }).then(
    (p) => (extra.push(p), p),
  );
}

/** Every committed revision's fact id, of every record in a KV bucket (history keeps 64 per key). */
async function committedFacts(conn: NatsConnection, bucket: string): Promise<string[]> {
  const kv = await new Kvm(conn).open(bucket);
  const ids: string[] = [];
  // A key can be listed twice when it changes while being listed.
  const keys = new Set<string>();
  for await (const k of await kv.keys()) keys.add(k);
  for (const key of keys) {
    for await (const e of await kv.history({ key })) {
      if (e.operation === "PUT") ids.push(e.json<Session | Environment>().lastFact.eventId);
    }
  }
  return ids;
}

/** Whether every recorder feed consumer has delivered and had acked everything. */
async function feedsDrained(conn: NatsConnection): Promise<boolean> {
  const jsm = await jetstreamManager(conn);
  for (const bucket of [Buckets.sessions, Buckets.environments, Buckets.runners]) {
    const info = await jsm.consumers.info(`KV_${bucket}`, "event-recorder");
    if (info.num_pending > 0 || info.num_ack_pending > 0) return false;
  }
  return true;
}

interface AuditMessage {
  subject: string;
  raw: Buffer;
  event: AuditEvent;
}

/**
 * Reads AUDIT from the start until every expected id has arrived and the
 * recorder's feeds are drained (so a duplicate would have been published by
 * then), in bounded fetches; each message is validated with the strict schema.
 */
async function auditUntil(conn: NatsConnection, expected: Iterable<string>): Promise<AuditMessage[]> {
  const want = new Set(expected);
  const consumer = await jetstream(conn).consumers.get(Streams.audit, { deliver_policy: DeliverPolicy.All });
  const out: AuditMessage[] = [];
  const seen = new Set<string>();
  for (let round = 0; round < 300; round++) {
    const batch = await consumer.fetch({ max_messages: 512, expires: 1000 });
    for await (const m of batch) {
      const event = AuditEvent.strict().parse(m.json());
      out.push({ subject: m.subject, raw: Buffer.from(m.data), event });
      seen.add(event.id);
    }
    if ([...want].every((id) => seen.has(id)) && (await feedsDrained(conn))) {
      const total = (await (await jetstreamManager(conn)).streams.info(Streams.audit)).state.messages;
      if (total === out.length) return out;
    }
  }
  throw new Error(`AUDIT never held every expected event: ${String([...want].filter((id) => !seen.has(id)).length)} missing`);
}

function expectOneToOne(committed: string[], events: AuditEvent[]): void {
  const ids = events.map((e) => e.id);
  expect(new Set(committed).size, "fact ids are unique").toBe(committed.length);
  const counts = new Map<string, number>();
  for (const id of ids) counts.set(id, (counts.get(id) ?? 0) + 1);
  expect([...counts].filter(([, n]) => n > 1), "duplicated events").toEqual([]);
  expect(committed.filter((id) => !counts.has(id)), "missing events").toEqual([]);
  expect(ids.filter((id) => !committed.includes(id)), "events without a committed fact").toEqual([]);
}

/**
 * Creates sessions and deletes them (queued → canceled with no runner) until
 * at least `transitions` of those calls committed: a create answered 201 and
 * a delete answered 200 each committed one transition. Calls refused while a
 * service is down are not counted, so the target holds whatever was killed.
 * `onAttempt` runs before each create with the attempt's index.
 */
async function churn(s: Stack, transitions: number, concurrency: number, onAttempt?: (i: number) => Promise<void>): Promise<void> {
  let attempts = 0;
  let committed = 0;
  const worker = async () => {
    while (committed < transitions) {
      await onAttempt?.(attempts++);
      const created = await api(s.url, s.token, "POST", "/v1/sessions", { spec: { cmd: ["true"] } }).catch(() => undefined);
      if (created?.status !== 201) continue;
      committed += 1;
      const id = (created.body as Session).id;
      for (let attempt = 0; attempt < 20; attempt++) {
        const del = await api(s.url, s.token, "DELETE", `/v1/sessions/${id}`).catch(() => undefined);
        if (del?.status === 200) committed += 1;
        if (del && (del.status === 200 || del.status === 404 || del.status === 409)) break;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

describe("audit: exactly one event per committed fact", () => {
  it(
    "SIGKILL of the recorder and the scheduler at random points over ≥ 500 transitions: committed revisions and events match one to one",
    async () => {
      const { stack: s, nc: conn } = await up(0);
      let recorder: ServiceProcess = s.recorder;
      let scheduler: ServiceProcess = s.scheduler;
      // Random kill points, ~every 18 attempts (≈ 36 transitions), alternating the victim.
      const kills = new Map<number, "recorder" | "scheduler">();
      for (let at = 5, k = 0; at < 240; at += 12 + Math.floor(Math.random() * 15), k++) kills.set(at, k % 2 === 0 ? "recorder" : "scheduler");
      let restarting: Promise<void> = Promise.resolve();
      await churn(s, 500, 8, async (i) => {
        const victim = kills.get(i);
        if (victim === "recorder") {
          restarting = restarting.then(async () => {
            await recorder.kill();
            recorder = await startRecorder(s);
          });
        } else if (victim === "scheduler") {
          restarting = restarting.then(async () => {
            await scheduler.kill();
            scheduler = await startScheduler(s);
          });
        }
        if (victim) await restarting;
      });
      await restarting;
      const committed = await committedFacts(conn, Buckets.sessions);
      expect(committed.length).toBeGreaterThanOrEqual(500);
      const audit = await auditUntil(conn, committed);
      expectOneToOne(
        committed,
        audit.filter((m) => m.event.resource.kind === "session").map((m) => m.event),
      );
    },
    300_000,
  );

  it(
    "two recorder replicas, a session printing a marker and an environment holding secrets: one event each, only the fixed fields",
    async () => {
      const { stack: s, nc: conn } = await up(1);
      await startRecorder(s);
      const TERM_MARKER = `TERMMARK${randomBytes(6).toString("hex")}`;
      const SECRET_MARKER = `SECRETMARK${randomBytes(6).toString("hex")}`;
      const SETUP_MARKER = `SETUPMARK${randomBytes(6).toString("hex")}`;

      const env = await api(s.url, s.token, "POST", "/v1/environments", {
        name: "marked",
        setup: `echo ${SETUP_MARKER}`,
        init: `echo ${SETUP_MARKER}`,
        secretRefs: [SECRET_MARKER],
        egressAllow: [`${SECRET_MARKER.toLowerCase()}.example.com`],
      });
      expect(env.status, JSON.stringify(env.body)).toBe(201);
      const envId = (env.body as Environment).id;
      expect((await api(s.url, s.token, "PATCH", `/v1/environments/${envId}`, { init: "true" })).status).toBe(200);

      const created = await api(s.url, s.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", `echo ${TERM_MARKER}; exit 0`] }, oneShot: true });
      expect(created.status).toBe(201);
      const session = created.body as Session;
      // Wait for the end of the session (its last revision) on the KV watch.
      const kv = await new Kvm(conn).open(Buckets.sessions);
      const w = await kv.watch({ key: `default.${session.id}` });
      for await (const e of w) if (e.operation === "PUT" && e.json<Session>().state === "destroyed") break;
      w.stop();
      // More churn so the two replicas share work.
      await churn(s, 80, 4);

      // Collect the committed facts until no revision arrives while AUDIT catches up (a deleted session's sandbox teardown may still write).
      let sessionFacts: string[] = [];
      let envFacts: string[] = [];
      let audit: AuditMessage[] = [];
      for (let round = 0; round < 10; round++) {
        sessionFacts = await committedFacts(conn, Buckets.sessions);
        envFacts = await committedFacts(conn, Buckets.environments);
        audit = await auditUntil(conn, [...sessionFacts, ...envFacts]);
        if ((await committedFacts(conn, Buckets.sessions)).length === sessionFacts.length) break;
      }
      expectOneToOne(sessionFacts, audit.filter((m) => m.event.resource.kind === "session").map((m) => m.event));
      expectOneToOne(envFacts, audit.filter((m) => m.event.resource.kind === "environment").map((m) => m.event));
      const runnerEvents = audit.filter((m) => m.event.resource.kind === "runner");
      expect(runnerEvents.map((m) => `${m.subject} ${m.event.action}`)).toContain("paddock.audit.fleet.runner.runner-1 register");
      expect(new Set(runnerEvents.map((m) => m.event.id)).size).toBe(runnerEvents.length);
      for (const m of audit) {
        expect(m.subject).toBe(Subjects.audit(m.event.workspaceId, m.event.resource.kind, m.event.resource.id));
      }
      // The actions of the marked session, in order.
      expect(audit.filter((m) => m.event.resource.id === session.id).map((m) => m.event.action)).toEqual(
        expect.arrayContaining(["create", "place", "start"]),
      );

      // Grep every stored byte of AUDIT for the planted markers.
      const raw = Buffer.concat(audit.map((m) => m.raw)).toString("latin1");
      for (const marker of [TERM_MARKER, SECRET_MARKER, SECRET_MARKER.toLowerCase(), SETUP_MARKER]) expect(raw).not.toContain(marker);
      // The marker really was printed and the secret really is on the record: the test would catch a leak.
      const log = await api(s.url, s.token, "GET", `/v1/sessions/${session.id}/log`);
      expect(String(log.body)).toContain(TERM_MARKER);
      expect(JSON.stringify((await api(s.url, s.token, "GET", `/v1/environments/${envId}`)).body)).toContain(SECRET_MARKER);
    },
    180_000,
  );

  it(
    "a recorder that was down while 100 transitions happened catches up exactly",
    async () => {
      const { stack: s, nc: conn } = await up(0);
      await churn(s, 10, 2);
      await auditUntil(conn, await committedFacts(conn, Buckets.sessions));
      await s.recorder.kill();
      const before = (await committedFacts(conn, Buckets.sessions)).length;
      await churn(s, 100, 4);
      const committed = await committedFacts(conn, Buckets.sessions);
      expect(committed.length - before).toBeGreaterThanOrEqual(100);
      await startRecorder(s);
      const audit = await auditUntil(conn, committed);
      expectOneToOne(committed, audit.filter((m) => m.event.resource.kind === "session").map((m) => m.event));
    },
    180_000,
  );
});

describe("example usage observer", () => {
  const usage = (n: number): Usage => ({ ...ZERO_USAGE, cpuTimeSeconds: n / 2, memoryByteSeconds: n * 1000, networkBytes: n, storageBytes: 0, agentTokenCount: 1 });
  const ev = (id: string, ws: string, kind: "session" | "environment", n: number): AuditEvent => ({
    id,
    workspaceId: ws,
    actorId: "a",
    action: "exit",
    resource: { kind, workspaceId: ws, id: `r-${id}`, creatorId: "a" },
    at: 1,
    usage: usage(n),
    placementGeneration: 1,
  });

  it("keeps a running total per workspace from its own durable consumer, counting a redelivered event once", async () => {
    nats = await startNatsServer();
    nc = await connect({ servers: nats.url });
    const { provision } = await import("@paddock/bus");
    await provision(nc, { replicas: 1 });
    const js = jetstream(nc);
    const events = [ev("e1", "ws1", "session", 2), ev("e2", "ws1", "session", 4), ev("e3", "ws2", "session", 10), ev("e4", "ws1", "environment", 100), ev("e5", "ws3", "session", 7)];
    for (const e of events) await js.publish(Subjects.audit(e.workspaceId, e.resource.kind, e.resource.id), JSON.stringify(e), { msgID: e.id });
    // A republish with the same id is dropped by AUDIT itself.
    await js.publish(Subjects.audit("ws1", "session", "r-e1"), JSON.stringify(events[0]), { msgID: "e1" });

    let lost = false;
    const totalsOf = (o: { totals: ReadonlyMap<string, Usage> }) => Object.fromEntries(o.totals);
    // Every workspace's session events; e2's ack is "lost" once, so it is redelivered.
    let notify: () => void = () => undefined;
    const all = await startUsageObserver({
      nc,
      durable: "billing-all",
      loseAck: (e) => {
        if (e.id !== "e2" || lost) return false;
        lost = true;
        return true;
      },
      onTotals: () => notify(),
    });
    const perWs = await startUsageObserver({ nc, durable: "billing-ws1", workspaces: ["ws1"] });
    const jsm = await jetstreamManager(nc);
    const settled = async (durable: string, applied: () => number, want: number) => {
      for (let i = 0; i < 2000; i++) {
        const info = await jsm.consumers.info(Streams.audit, durable);
        if (applied() >= want && info.num_pending === 0 && info.num_ack_pending === 0) return;
        await new Promise<void>((r) => {
          notify = r;
          setImmediate(r);
        });
      }
      throw new Error(`${durable} never settled`);
    };
    await settled("billing-all", () => all.applied, 4);
    await settled("billing-ws1", () => perWs.applied, 3);
    expect(all.skipped).toBe(1); // e2 delivered twice, applied once
    expect(totalsOf(all)).toEqual({ ws1: { ...usage(6), cpuTimeSeconds: 3, agentTokenCount: 2 }, ws2: usage(10), ws3: usage(7) });
    expect(totalsOf(perWs)).toEqual({ ws1: { ...usage(106), cpuTimeSeconds: 53, agentTokenCount: 3 } });
    await all.stop();
    await perWs.stop();
  });
});
