import { beforeAll, describe, expect, it } from "vitest";
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { Registry } from "prom-client";
import {
  AuditEvent,
  Buckets,
  Streams,
  type Environment,
  type Runner,
  type Session,
} from "@paddock/contracts";
import { provision } from "@paddock/bus";
import { silentLogger } from "@paddock/logging";
import { FIXTURE_NOW, makeEnvironment, makeRunner, makeSession } from "@paddock/testing";
import { useNatsServer } from "@paddock/testing/vitest";
import { FEED_CONSUMER, createRecorder, runnerEvent, runnerEventId, sessionEvent } from "./recorder.ts";
import { createRecorderMetrics } from "./metrics.ts";

const NOW = FIXTURE_NOW;
let seq = 0;
const evt = () => `evt_t${String(++seq)}`;

function session(p: Partial<Session> = {}): Session {
  return makeSession({
    workspaceId: "ws1",
    creatorId: "alice",
    state: "queued",
    spec: { cmd: ["sh", "-c", "echo marker"] },
    poolId: undefined,
    runnerId: undefined,
    placementGeneration: 0,
    error: "raw error text",
    lastFact: { eventId: evt(), action: "create", actorId: "alice", at: NOW },
    ...p,
  });
}

function environment(p: Partial<Environment> = {}): Environment {
  return makeEnvironment({
    workspaceId: "ws1",
    name: "base",
    setup: "echo SETUP_MARKER",
    secretRefs: ["API_KEY"],
    lastFact: { eventId: evt(), action: "create", actorId: "boss", at: NOW },
    ...p,
  });
}

function runner(p: Partial<Runner> = {}): Runner {
  return makeRunner({ poolId: "p1", ...p });
}

describe("runnerEvent (pure)", () => {
  const r1 = runner();
  it("derives register, lose and update; capacity-only revisions commit nothing", () => {
    expect(runnerEvent(undefined, r1, 5, 9)).toMatchObject({ kind: "event", event: { action: "register", actorId: "r1", at: 9 } });
    expect(runnerEvent(r1, { ...r1, capacityUsed: 1, reservations: [{ at: NOW + 1, count: 1 }] }, 6, 9)).toEqual({ kind: "none" });
    expect(runnerEvent(r1, { ...r1, state: "draining" }, 7, 9)).toMatchObject({ kind: "event", event: { action: "update", actorId: "scheduler" } });
    expect(runnerEvent(r1, { ...r1, state: "lost", capacityUsed: 0 }, 8, 9)).toMatchObject({ kind: "event", event: { action: "lose" } });
    expect(runnerEvent({ ...r1, state: "lost" }, { ...r1, generation: 2, lastSeenAt: NOW + 5 }, 9, 9)).toMatchObject({
      kind: "event",
      event: { action: "register", resource: { kind: "runner", workspaceId: "fleet", id: "r1" }, workspaceId: "fleet" },
    });
    // The previous revision is gone and this one is not a first registration: cannot tell.
    expect(runnerEvent(undefined, { ...r1, lastSeenAt: NOW + 5 }, 10, 9)).toEqual({ kind: "gap" });
  });

  it("event ids are deterministic, distinct per key and revision, and valid ids even for the longest keys", () => {
    const long = "x".repeat(64);
    const a = runnerEventId(long, long, 123456789);
    expect(AuditEvent.shape.id.safeParse(a).success).toBe(true);
    expect(runnerEventId(long, long, 123456789)).toBe(a);
    expect(runnerEventId("a_b", "c", 1)).not.toBe(runnerEventId("a", "b_c", 1));
    expect(runnerEventId("p", "r", 1)).not.toBe(runnerEventId("p", "r", 2));
  });

  it("session events carry only the fixed fields", () => {
    const e = sessionEvent(session());
    expect(AuditEvent.strict().parse(e)).toEqual(e);
    expect(JSON.stringify(e)).not.toMatch(/marker|raw error/);
  });

  it("a run event names its app generation (app, generation, trigger, exit code, signal) and nothing of the run's reason", () => {
    const run = { generation: 3, phase: "failed" as const, trigger: "resume" as const, exitCode: null, signal: "SIGKILL", reason: "killed by SIGKILL marker", startedAt: NOW, endedAt: NOW };
    const e = sessionEvent(
      session({
        state: "running",
        apps: { web: run },
        lastFact: { eventId: evt(), action: "run.failed", actorId: "r1", at: NOW, run: { app: "web", generation: 3, trigger: "resume", exitCode: null, signal: "SIGKILL" } },
      }),
    );
    expect(AuditEvent.strict().parse(e)).toEqual(e);
    expect(e).toMatchObject({ action: "run.failed", run: { app: "web", generation: 3, trigger: "resume", exitCode: null, signal: "SIGKILL" } });
    expect(JSON.stringify(e)).not.toMatch(/marker/);
    expect(sessionEvent(session())).not.toHaveProperty("run");
  });
});

describe("recorder against a real nats-server", () => {
  const nats = useNatsServer();
  let sessions: KV;
  let environments: KV;
  let runners: KV;

  beforeAll(async () => {
    await provision(nats.nc, { replicas: 1 });
    const kvm = new Kvm(nats.nc);
    [sessions, environments, runners] = await Promise.all([kvm.open(Buckets.sessions), kvm.open(Buckets.environments), kvm.open(Buckets.runners)]);
  });

  async function auditEvents(count: number): Promise<Array<{ subject: string; event: AuditEvent }>> {
    const consumer = await jetstream(nats.nc).consumers.get(Streams.audit, { deliver_policy: DeliverPolicy.All });
    const out: Array<{ subject: string; event: AuditEvent }> = [];
    if (count === 0) return out;
    for await (const m of await consumer.consume()) {
      out.push({ subject: m.subject, event: AuditEvent.strict().parse(m.json()) });
      if (out.length === count) break;
    }
    return out;
  }

  async function pendingOf(bucket: string): Promise<{ pending: number; ackPending: number }> {
    const info = await (await jetstreamManager(nats.nc)).consumers.info(`KV_${bucket}`, FEED_CONSUMER);
    return { pending: info.num_pending, ackPending: info.num_ack_pending };
  }

  /** Resolves once both replicas have acked everything on the three feeds (watching the consumers' state). */
  async function drained(): Promise<void> {
    for (let i = 0; i < 2000; i++) {
      const all = await Promise.all([Buckets.sessions, Buckets.environments, Buckets.runners].map(pendingOf));
      if (all.every((p) => p.pending === 0 && p.ackPending === 0)) return;
      await new Promise((r) => setImmediate(r));
    }
    throw new Error("feeds not drained");
  }

  it("creating a recorder touches nothing on the bus; start() makes its feed consumers and stop() ends them", async () => {
    const consumersOf = async () => {
      const jsm = await jetstreamManager(nats.nc);
      return Promise.all([Buckets.sessions, Buckets.environments, Buckets.runners].map(async (b) => (await jsm.consumers.list(`KV_${b}`).next()).map((c) => c.name)));
    };
    const registry = new Registry();
    const recorder = createRecorder({ nc: nats.nc, log: silentLogger(), metrics: createRecorderMetrics(registry) });
    await nats.nc.flush();
    expect(await consumersOf()).toEqual([[], [], []]);
    await recorder.start();
    expect(await consumersOf()).toEqual([[FEED_CONSUMER], [FEED_CONSUMER], [FEED_CONSUMER]]);
    await recorder.stop();
  });

  it("a recorder started after one record had more revisions than the KV client's cap of 64 still records every one", async () => {
    const key = "ws1.deep";
    let revision = await sessions.put(key, JSON.stringify(session({ id: "deep" })));
    const ids: string[] = [];
    for (let i = 0; i < 150; i++) {
      const s = session({ id: "deep", controllerGeneration: i + 1, lastFact: { eventId: `evt_deep_${i}`, action: "attach", actorId: "alice", at: NOW + i } });
      ids.push(s.lastFact.eventId);
      revision = await sessions.update(key, JSON.stringify(s), revision);
    }
    const registry = new Registry();
    const recorder = createRecorder({ nc: nats.nc, log: silentLogger(), metrics: createRecorderMetrics(registry) });
    await recorder.start();
    const consumer = await jetstream(nats.nc).consumers.get(Streams.audit, { filter_subjects: ["paddock.audit.ws1.session.deep"], deliver_policy: DeliverPolicy.All });
    const seen = new Set<string>();
    for await (const m of await consumer.consume()) {
      seen.add(AuditEvent.parse(m.json()).id);
      if (ids.every((id) => seen.has(id))) break;
    }
    expect(ids.filter((id) => !seen.has(id))).toEqual([]);
    await recorder.stop();
    // The other tests count events from a clean slate.
    await (await jetstreamManager(nats.nc)).streams.purge(Streams.audit);
    await sessions.purge(key);
  });

  it("two replicas turn sessions, environments and runner facts into one event each, and a full replay adds none", async () => {
    const mk = async () => {
      const registry = new Registry();
      const recorder = createRecorder({ nc: await connect({ servers: nats.url }), log: silentLogger(), metrics: createRecorderMetrics(registry) });
      await recorder.start();
      return recorder;
    };
    const [a, b] = [await mk(), await mk()];

    const s0 = session();
    const rev = await sessions.create("ws1.s1", JSON.stringify(s0));
    const s1 = session({ state: "creating", placementGeneration: 1, lastFact: { eventId: evt(), action: "place", actorId: "scheduler", at: NOW + 1 } });
    await sessions.update("ws1.s1", JSON.stringify(s1), rev);
    await sessions.delete("ws1.s1"); // a delete marker commits no fact

    const e0 = environment();
    const erev = await environments.create("ws1.env1", JSON.stringify(e0));
    await environments.update("ws1.env1", JSON.stringify(environment({ lastFact: { eventId: evt(), action: "update", actorId: "boss", at: NOW + 2 } })), erev);

    const r0 = runner();
    let rrev = await runners.create("p1.r1", JSON.stringify(r0)); // register
    rrev = await runners.update("p1.r1", JSON.stringify({ ...r0, capacityUsed: 1, reservations: [{ at: NOW + 3, count: 1 }] }), rrev); // nothing
    rrev = await runners.update("p1.r1", JSON.stringify({ ...r0, capacityUsed: 2, reservations: [{ at: NOW + 3, count: 1 }, { at: NOW + 4, count: 1 }] }), rrev); // nothing
    rrev = await runners.update("p1.r1", JSON.stringify({ ...r0, state: "cordoned", capacityUsed: 2 }), rrev); // update
    rrev = await runners.update("p1.r1", JSON.stringify({ ...r0, state: "lost", capacityUsed: 0, lostReason: "lease expired" }), rrev); // lose
    await runners.update("p1.r1", JSON.stringify({ ...r0, generation: 2, lastSeenAt: NOW + 9 }), rrev); // register
    await runners.create("p2.r1", JSON.stringify(runner({ poolId: "p2" }))); // same runner id, another pool: register

    await drained();
    const events = await auditEvents(9);
    const summary = events.map(({ subject, event }) => `${subject} ${event.action}`);
    expect(summary).toEqual(
      expect.arrayContaining([
        "paddock.audit.ws1.session.s1 create",
        "paddock.audit.ws1.session.s1 place",
        "paddock.audit.ws1.environment.env1 create",
        "paddock.audit.ws1.environment.env1 update",
        "paddock.audit.fleet.runner.r1 register",
        "paddock.audit.fleet.runner.r1 update",
        "paddock.audit.fleet.runner.r1 lose",
      ]),
    );
    expect(summary.filter((s) => s.endsWith("runner.r1 register"))).toHaveLength(3);
    expect(new Set(events.map((e) => e.event.id)).size).toBe(9);
    expect(JSON.stringify(events)).not.toMatch(/SETUP_MARKER|API_KEY|marker|raw error|lease expired/);
    const env = events.find((e) => e.event.resource.kind === "environment")?.event;
    expect(env).toMatchObject({ workspaceId: "ws1", resource: { workspaceId: "ws1", id: "env1", creatorId: "ws1" }, placementGeneration: 0 });

    // Replay every feed from the start (as after a lost ack): the same ids, so AUDIT keeps 9.
    await a.stop();
    await b.stop();
    const jsm = await jetstreamManager(nats.nc);
    for (const bucket of [Buckets.sessions, Buckets.environments, Buckets.runners]) await jsm.consumers.delete(`KV_${bucket}`, FEED_CONSUMER);
    const c = await mk();
    await drained();
    await c.stop();
    expect((await jsm.streams.info(Streams.audit)).state.messages).toBe(9);
  });
});
