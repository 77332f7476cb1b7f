/**
 * The chaos suite's store-reading detectors can fail: against a real
 * nats-server, a clean history counts zero, and a fault planted directly in
 * KV `sessions`, DISPATCH or AUDIT is counted exactly, under its kind.
 *
 * checkAudit first waits for the event recorder's feed consumers to drain. No
 * recorder runs here: `recordFeeds` stands in for it over the real durable
 * consumers (the recorder's own derivation of one event per session or
 * environment revision, message id = fact id, acked after the publish), so
 * the faults are planted on top of what a recorder would have left.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { provision } from "@paddock/bus";
import {
  Buckets,
  environmentKey,
  FLEET_WORKSPACE,
  kvStreamName,
  runnerKey,
  sessionKey,
  Streams,
  Subjects,
  ZERO_USAGE,
  type AuditEvent,
  type DispatchCommand,
  type Environment,
  type Runner,
  type Session,
} from "@paddock/contracts";
import { makeEnvironment, makeSession, startNatsServer, type NatsServerHandle } from "@paddock/testing";
import { checkAudit, checkPlacedOnce } from "../../chaos/src/checks.ts";
import { environmentEvent, sessionEvent } from "../../services/event-recorder/src/derive.ts";
import { FEED_CONSUMER } from "../../services/event-recorder/src/recorder.ts";
import { Anomalies } from "../../chaos/src/report.ts";

const WS = "default";
const POOL = "p1";
const NOW = 1_700_000_000_000;
const PLACED_TWICE = "placed twice in one generation";
const MISSING = "audit events missing";
const DUPLICATED = "audit events duplicated";
const ORPHAN = "audit events without a committed fact";
const MALFORMED = "audit events malformed";
const AUDIT_KINDS = [MISSING, DUPLICATED, ORPHAN, MALFORMED];
const FEEDS = [Buckets.sessions, Buckets.environments, Buckets.runners];

let nats: NatsServerHandle;
let nc: NatsConnection;
let js: JetStreamClient;
let jsm: JetStreamManager;
let sessions: KV;
let environments: KV;
let runners: KV;
// Ids are unique across the file: AUDIT's duplicate window outlives a purge of the stream.
let counter = 0;
const uid = (prefix: string) => `${prefix}_${String(++counter)}`;

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connect({ servers: nats.url });
  await provision(nc, { replicas: 1 });
  js = jetstream(nc);
  jsm = await jetstreamManager(nc);
  const kvm = new Kvm(nc);
  [sessions, environments, runners] = await Promise.all([kvm.open(Buckets.sessions), kvm.open(Buckets.environments), kvm.open(Buckets.runners)]);
});

afterAll(async () => {
  await nc?.drain();
  await nats?.stop();
});

// Each test starts from empty feeds, DISPATCH and AUDIT (the detectors read whole streams).
beforeEach(async () => {
  for (const stream of [...FEEDS.map(kvStreamName), Streams.audit, Streams.dispatch]) await jsm.streams.purge(stream);
  for (const bucket of FEEDS) await jsm.consumers.delete(kvStreamName(bucket), FEED_CONSUMER).catch(() => false);
});

function session(id: string, p: Partial<Session>): Session {
  return makeSession({
    id,
    workspaceId: WS,
    creatorId: "alice",
    spec: { cmd: ["sh"] },
    poolId: POOL,
    runnerId: undefined,
    lastFact: { eventId: uid("evt"), action: "start", actorId: "scheduler", at: NOW },
    ...p,
  });
}

function environment(id: string, action: string): Environment {
  return makeEnvironment({ id, workspaceId: WS, name: id, createdAt: NOW, updatedAt: NOW, lastFact: { eventId: uid("evt"), action, actorId: "alice", at: NOW } });
}

/** One committed revision of a session record. */
async function commit(s: Session): Promise<Session> {
  await sessions.put(sessionKey(WS, s.id), JSON.stringify(s));
  return s;
}

async function commitEnvironment(e: Environment): Promise<Environment> {
  await environments.put(environmentKey(WS, e.id), JSON.stringify(e));
  return e;
}

async function dispatch(type: "start" | "destroy", sessionId: string, runnerId: string, placementGeneration: number, poolId = POOL): Promise<void> {
  const base = { sessionId, workspaceId: WS, runnerGeneration: 1, placementGeneration };
  const cmd: DispatchCommand = type === "start" ? { type, ...base, spec: { cmd: ["sh"] }, mode: "run", trigger: "initial" } : { type, ...base };
  await js.publish(Subjects.dispatch(poolId, runnerId), JSON.stringify(cmd));
}

/** Publishes an event to AUDIT (on its resource's subject); the stored sequence. */
async function publishEvent(e: AuditEvent, msgID?: string): Promise<number> {
  const ack = await js.publish(Subjects.audit(e.workspaceId, e.resource.kind, e.resource.id), JSON.stringify(e), msgID ? { msgID } : undefined);
  return ack.seq;
}

async function openFeeds(): Promise<void> {
  for (const bucket of FEEDS) {
    await jsm.consumers.add(kvStreamName(bucket), { durable_name: FEED_CONSUMER, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.All });
  }
}

/** The recorder stand-in: drains the feed consumers, one AUDIT event per fact revision; answers event id → AUDIT sequence. */
async function recordFeeds(): Promise<Map<string, number>> {
  const stored = new Map<string, number>();
  for (const bucket of FEEDS) {
    const consumer = await js.consumers.get(kvStreamName(bucket), FEED_CONSUMER);
    let pending = (await consumer.info()).num_pending;
    while (pending > 0) {
      let got = 0;
      for await (const m of await consumer.fetch({ max_messages: Math.min(pending, 256), expires: 5_000 })) {
        got += 1;
        const e = bucket === Buckets.sessions ? sessionEvent(m.json<Session>()) : bucket === Buckets.environments ? environmentEvent(m.json<Environment>()) : undefined;
        if (e) stored.set(e.id, await publishEvent(e, e.id));
        await m.ackAck();
      }
      if (got === 0) throw new Error(`feed ${bucket}: ${pending} pending but nothing fetched`);
      pending -= got;
    }
  }
  return stored;
}

async function audit(timeoutMs = 10_000): Promise<{ a: Anomalies; facts: number; events: number; beyondHistory: number }> {
  const a = new Anomalies(AUDIT_KINDS);
  return { a, ...(await checkAudit(nc, a, timeoutMs)) };
}

/** The exact count of every audit kind (all declared, so a zero is checked too). */
function counts(n: { missing?: number; duplicated?: number; orphan?: number; malformed?: number } = {}): Record<string, number> {
  return { [MISSING]: n.missing ?? 0, [DUPLICATED]: n.duplicated ?? 0, [ORPHAN]: n.orphan ?? 0, [MALFORMED]: n.malformed ?? 0 };
}

async function placed(ids?: ReadonlySet<string>): Promise<Anomalies> {
  const a = new Anomalies([PLACED_TWICE]);
  await checkPlacedOnce(nc, a, ids);
  return a;
}

describe("checkPlacedOnce (real nats-server)", () => {
  it("counts zero for a clean takeover, then a record revision claiming the new generation on another runner", async () => {
    const s = uid("ses");
    await dispatch("start", s, "r1", 1);
    await commit(session(s, { state: "creating", runnerId: "r1" }));
    await commit(session(s, { runnerId: "r1" }));
    await dispatch("destroy", s, "r1", 1);
    await dispatch("start", s, "r2", 2);
    await commit(session(s, { state: "creating", runnerId: "r2", placementGeneration: 2 }));
    await commit(session(s, { runnerId: "r2", placementGeneration: 2 }));
    await commit(session(s, { state: "destroyed", runnerId: "r2", placementGeneration: 2 }));
    expect((await placed()).counts).toEqual({ [PLACED_TWICE]: 0 });

    // Planted: a second record revision of generation 2 placing the session on r3.
    await commit(session(s, { runnerId: "r3", placementGeneration: 2 }));
    const a = await placed();
    expect(a.counts).toEqual({ [PLACED_TWICE]: 1 });
    expect(a.details).toEqual([`${PLACED_TWICE}: ${s} generation 2: paddock.dispatch.${POOL}.r2, record:${POOL}.r2, record:${POOL}.r3`]);
  });

  it("counts one per session-generation placed twice: two starts to different runners, or a start and a record that disagree", async () => {
    const twoStarts = uid("ses");
    await dispatch("start", twoStarts, "r1", 1);
    await dispatch("start", twoStarts, "r2", 1);
    const disagree = uid("ses");
    await dispatch("start", disagree, "r1", 1);
    await commit(session(disagree, { runnerId: "r2" }));
    const clean = uid("ses");
    await dispatch("start", clean, "r1", 1);
    await dispatch("start", clean, "r1", 1); // a republished start to the same runner is one placement
    await commit(session(clean, { runnerId: "r1" }));

    const a = await placed();
    expect(a.counts).toEqual({ [PLACED_TWICE]: 2 });
    expect(a.details.join("\n")).toContain(`${twoStarts} generation 1: paddock.dispatch.${POOL}.r1, paddock.dispatch.${POOL}.r2`);
    expect(a.details.join("\n")).toContain(`${disagree} generation 1: paddock.dispatch.${POOL}.r1, record:${POOL}.r2`);
  });

  it("looks only at the sessions it is given", async () => {
    const byRecord = uid("ses");
    const byDispatch = uid("ses");
    const other = uid("ses");
    await commit(session(byRecord, { runnerId: "r1" }));
    await commit(session(byRecord, { runnerId: "r2" }));
    await dispatch("start", byDispatch, "r1", 1);
    await dispatch("start", byDispatch, "r2", 1);
    await commit(session(other, { runnerId: "r1" }));
    expect((await placed(new Set([other]))).counts[PLACED_TWICE]).toBe(0);
    expect((await placed(new Set([other, byRecord]))).counts[PLACED_TWICE]).toBe(1);
    expect((await placed(new Set([other, byDispatch]))).counts[PLACED_TWICE]).toBe(1);
    expect((await placed()).counts[PLACED_TWICE]).toBe(2);
  });

  it("tells runners apart by pool: one runner id in two pools is two runners", async () => {
    const viaDispatch = uid("ses");
    await dispatch("start", viaDispatch, "r1", 1);
    await dispatch("start", viaDispatch, "r1", 1, "other-pool");
    const viaRecord = uid("ses");
    await dispatch("start", viaRecord, "r1", 1);
    await commit(session(viaRecord, { runnerId: "r1", poolId: "other-pool" }));
    const a = await placed();
    expect(a.counts).toEqual({ [PLACED_TWICE]: 2 });
    expect(a.details.join("\n")).toContain("paddock.dispatch.other-pool.r1");
  });
});

describe("checkAudit (real nats-server)", () => {
  it("counts zero when every fact has its one event (runner revisions need none), then one missing for a deleted event", async () => {
    await openFeeds();
    const s1 = uid("ses");
    const gone = await commit(session(s1, { state: "creating" }));
    await commit(session(s1, {}));
    await commit(session(uid("ses"), {}));
    const env = uid("env");
    await commitEnvironment(environment(env, "create"));
    await commitEnvironment(environment(env, "update"));
    // A runner revision: on a feed that must drain, but carrying no fact (recordFeeds acks it, publishes nothing).
    const runner: Runner = { id: "r1", poolId: POOL, state: "active", generation: 1, capacityUsed: 0, capacityTotal: 4, capabilities: [], registeredAt: NOW, lastSeenAt: NOW };
    await runners.put(runnerKey(POOL, runner.id), JSON.stringify(runner));
    const stored = await recordFeeds();
    expect(stored.size).toBe(5);
    // The real recorder derives a runner event from it (no lastFact names it): neither counted nor an orphan.
    const fleet = { kind: "runner", workspaceId: FLEET_WORKSPACE, id: runner.id, creatorId: "scheduler" } as const;
    await publishEvent({ id: uid("evt"), workspaceId: FLEET_WORKSPACE, actorId: runner.id, action: "register", resource: fleet, at: NOW, usage: ZERO_USAGE, placementGeneration: 0 });

    const { a, ...figures } = await audit();
    expect(a.counts).toEqual(counts());
    expect(a.details).toEqual([]);
    expect(figures).toEqual({ facts: 5, events: 5, beyondHistory: 0 });

    // Planted: the event of the session's first revision is deleted from AUDIT.
    const id = gone.lastFact.eventId;
    expect(await jsm.streams.deleteMessage(Streams.audit, stored.get(id) ?? 0)).toBe(true);
    const after = await audit();
    expect(after.a.counts).toEqual(counts({ missing: 1 }));
    expect(after.a.details).toEqual([expect.stringMatching(new RegExp(`^${MISSING}: ${id} \\(${Buckets.sessions}/${WS}\\.${s1}@\\d+ start\\)$`))]);
    expect([after.facts, after.events, after.beyondHistory]).toEqual([5, 4, 0]);
  });

  it("counts each extra copy of an event under a fresh message id; a republish under the same id is dropped by the server", async () => {
    await openFeeds();
    const thrice = await commit(session(uid("ses"), {}));
    const once = await commit(session(uid("ses"), {}));
    const twice = await commitEnvironment(environment(uid("env"), "create"));
    const stored = await recordFeeds();
    for (let i = 0; i < 3; i++) await publishEvent(sessionEvent(thrice), uid("copy"));
    for (let i = 0; i < 2; i++) await publishEvent(environmentEvent(twice), uid("copy"));
    // Same message id as the recorder's publish: inside the duplicate window, so not stored again.
    expect(await publishEvent(sessionEvent(once), once.lastFact.eventId)).toBe(stored.get(once.lastFact.eventId));

    const { a, ...figures } = await audit();
    expect(a.counts).toEqual(counts({ duplicated: 5 }));
    expect([...a.details].sort()).toEqual([`${DUPLICATED}: ${thrice.lastFact.eventId} ×4`, `${DUPLICATED}: ${twice.lastFact.eventId} ×3`].sort());
    expect(figures).toEqual({ facts: 3, events: 8, beyondHistory: 0 });
  });

  it("counts an event without a committed fact, and each AUDIT message that is not a valid event", async () => {
    await openFeeds();
    const real = await commit(session(uid("ses"), {}));
    await recordFeeds();
    const ghost = session(uid("ses"), {}); // never committed
    await publishEvent(sessionEvent(ghost), ghost.lastFact.eventId);
    const subject = Subjects.audit(WS, "session", real.id);
    const notJson = await js.publish(subject, "not json");
    // A copy of the real event with one field too many: the schema is strict, so not a duplicate but malformed.
    const extra = await js.publish(subject, JSON.stringify({ ...sessionEvent(real), note: "extra" }));

    const { a, ...figures } = await audit();
    expect(a.counts).toEqual(counts({ orphan: 1, malformed: 2 }));
    expect([...a.details].sort()).toEqual(
      [`${ORPHAN}: ${ghost.lastFact.eventId} (resource ${ghost.id})`, `${MALFORMED}: seq ${notJson.seq} on ${subject}`, `${MALFORMED}: seq ${extra.seq} on ${subject}`].sort(),
    );
    expect(figures).toEqual({ facts: 1, events: 2, beyondHistory: 0 });
  });

  it("counts one missing for feeds that never drained, plus one per fact still without its event", async () => {
    await openFeeds();
    await commit(session(uid("ses"), {}));
    await recordFeeds();
    const late = await commit(session(uid("ses"), {})); // on the feed, not yet delivered
    const neverDrained = `${MISSING}: the recorder's feeds never drained`;
    let r = await audit(0);
    expect(r.a.counts).toEqual(counts({ missing: 2 }));
    expect(r.a.details).toEqual([neverDrained, expect.stringMatching(new RegExp(`^${MISSING}: ${late.lastFact.eventId} \\(${Buckets.sessions}/`))]);

    // Delivered but unacked: still not drained.
    const feed = await js.consumers.get(kvStreamName(Buckets.sessions), FEED_CONSUMER);
    const held = [];
    for await (const m of await feed.fetch({ max_messages: 1, expires: 5_000 })) held.push(m);
    expect(held).toHaveLength(1);
    expect((await feed.info()).num_ack_pending).toBe(1);
    r = await audit(0);
    expect(r.a.counts).toEqual(counts({ missing: 2 }));
    expect(r.a.details[0]).toBe(neverDrained);

    // The recorder catches up: its event published, then the revision acked.
    await publishEvent(sessionEvent(late), late.lastFact.eventId);
    for (const m of held) await m.ackAck();
    r = await audit(0);
    expect(r.a.counts).toEqual(counts());
    expect([r.facts, r.events]).toEqual([2, 2]);
  });

  it("excuses an orphan event of an environment whose feed history is full, not one of a session with room", async () => {
    const keep = (await jsm.streams.info(kvStreamName(Buckets.environments))).config.max_msgs_per_subject;
    expect(keep).toBe(256);
    await openFeeds();
    const env = uid("env");
    for (let n = 1; n < keep; n++) await commitEnvironment(environment(env, n === 1 ? "create" : "update"));
    const s = await commit(session(uid("ses"), {}));
    await recordFeeds();
    // Planted: an event of each resource whose fact no retained revision carries.
    const envOrphan = environmentEvent(environment(env, "update"));
    const sesOrphan = sessionEvent(session(s.id, {}));
    for (const e of [envOrphan, sesOrphan]) await publishEvent(e, e.id);

    // keep - 1 revisions: the environment's history has room, so both orphans count.
    let r = await audit();
    expect(r.a.counts).toEqual(counts({ orphan: 2 }));
    expect([r.facts, r.events, r.beyondHistory]).toEqual([keep, keep + 2, 0]);

    // The keep-th revision fills the history: the environment's orphan is excused, the session's is not.
    await commitEnvironment(environment(env, "update"));
    await recordFeeds();
    r = await audit();
    expect(r.a.counts).toEqual(counts({ orphan: 1 }));
    expect(r.a.details).toEqual([`${ORPHAN}: ${sesOrphan.id} (resource ${s.id})`]);
    expect([r.facts, r.events, r.beyondHistory]).toEqual([keep + 1, keep + 3, 1]);

    // One more: the first revision leaves the feed, and its recorded event is excused too.
    await commitEnvironment(environment(env, "update"));
    await recordFeeds();
    r = await audit();
    expect(r.a.counts).toEqual(counts({ orphan: 1 }));
    expect([r.facts, r.events, r.beyondHistory]).toEqual([keep + 1, keep + 4, 2]);
  });
});
