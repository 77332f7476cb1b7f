import { describe, expect, it } from "vitest";
import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Api, inboxPrefixOf, RegisterRunnerReply, RegisterRunnerRequest, Runner, RunnerFact, runnerNatsUser, Subjects, type Checkpoint } from "@paddock/contracts";
import { callRpc, decodeJson, encodeJson } from "@paddock/bus";
import { untilSession } from "@paddock/testing";
import {
  alice,
  create,
  dispatchInbox,
  factFor,
  get,
  publishFact,
  register,
  runningSession,
  useHarness,
  waitForCapacityUsed,
  waitForState,
  type SchedulerHarness,
  factsSettled,
  testSealKey,
} from "../testing/testkit.ts";

let h: SchedulerHarness;
useHarness((started) => (h = started));

const checkpoint: Checkpoint = { ref: "checkpoints/ws1/s/1-x", format: "tar+gzip", capabilities: ["portable"] };

async function expireLease(runnerId: string): Promise<void> {
  const leases = await new Kvm(h.nc).open("runner-leases");
  await leases.delete(`default.${runnerId}`);
}

async function runner(runnerId: string) {
  const page = await callRpc(h.nc, Api.listRunners, { scope: alice, limit: 100 });
  return page.runners.find((r) => r.id === runnerId);
}

/** Resolves once the runner record reaches `state` (KV watch). */
async function waitForRunnerState(runnerId: string, state: string): Promise<void> {
  const kv = await new Kvm(h.nc).open("runners");
  const w = await kv.watch({ key: `default.${runnerId}` });
  for await (const e of w) if (e.operation === "PUT" && Runner.parse(e.json()).state === state) break;
  w.stop();
}

describe("liveness", () => {
  it("a runner whose lease expired is lost after the grace period; its sessions follow the policy", async () => {
    const s = await h.start({ PADDOCK_RUNNER_LOST_GRACE_MS: "20000" });
    const inbox1 = await dispatchInbox(h.nc, "r1");
    const inbox2 = await dispatchInbox(h.nc, "r2");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 3 });
    const plain = await runningSession(h.nc, "r1", inbox1);
    const saved = await runningSession(h.nc, "r1", inbox1);
    await publishFact(h.nc, factFor("r1", saved.start, { type: "checkpointed", requestId: "chk_1", checkpoint, sealKey: testSealKey }));
    await untilSession(h.nc, saved.session.id, (x) => x.checkpoint !== undefined);
    await publishFact(h.nc, factFor("r1", saved.start, { type: "app", app: "main", run: { generation: 1, phase: "running", trigger: "initial", startedAt: 1 } }));
    await untilSession(h.nc, saved.session.id, (x) => x.apps?.main !== undefined);
    const { session: starting } = await create(h.nc, alice);
    await inbox1.next();

    await expireLease("r1");
    await waitForLeaseGone("r1");
    h.clock.advance(10_000);
    await s.sweep();
    expect((await runner("r1"))?.state).toBe("active");
    h.clock.advance(11_000);
    await register(h.nc, { runnerId: "r2", generation: 1, capacityTotal: 3 });
    await s.sweep();
    await waitForRunnerState("r1", "lost");
    expect((await waitForState(h.nc, plain.session.id, "dead")).error).toMatch(/^runner_lost/);
    expect((await waitForState(h.nc, starting.id, "dead")).error).toMatch(/^runner_lost/);
    // The checkpointed one resumes on the other runner, from its checkpoint, in a new generation.
    const restart = await inbox2.next();
    // Its apps go on from the generations the record shows.
    expect(restart).toMatchObject({ type: "start", sessionId: saved.session.id, trigger: "resume", restore: checkpoint, placementGeneration: 2, appGenerations: { main: 1 } });

    // The lost runner's reports count for nothing.
    await publishFact(h.nc, factFor("r1", saved.start, { type: "exited", exitCode: 1 }));
    await publishFact(h.nc, factFor("r2", restart, { type: "running" }));
    expect((await waitForState(h.nc, saved.session.id, "running")).runnerId).toBe("r2");
    await publishFact(h.nc, factFor("r2", restart, { type: "app", app: "main", run: { generation: 2, phase: "running", trigger: "resume", startedAt: 2 } }));
    expect((await untilSession(h.nc, saved.session.id, (x) => x.apps?.main?.generation === 2)).apps?.main).toMatchObject({ trigger: "resume", phase: "running" });

    // It comes back: registration fences it (new generation) and names what to destroy.
    const reply = await register(h.nc, {
      runnerId: "r1",
      generation: 2,
      capacityTotal: 3,
      sessions: [
        { sessionId: plain.session.id, workspaceId: "ws1", placementGeneration: 1 },
        { sessionId: saved.session.id, workspaceId: "ws1", placementGeneration: 1 },
      ],
    });
    expect(reply.accepted).toBe(true);
    expect(reply.destroy.map((d) => d.sessionId).sort()).toEqual([plain.session.id, saved.session.id].sort());
    expect((await runner("r1"))?.state).toBe("active");
  });
});

describe("liveness of a runner that joins later", () => {
  it("is judged from its registration, not the scheduler's start: not lost before its first lease reaches the watch", async () => {
    const s = await h.start({ PADDOCK_RUNNER_LOST_GRACE_MS: "20000" });
    // Long after the scheduler started (past one TTL plus the grace), a runner registers; its first
    // lease put has not reached the watch yet (a runner registers, then puts it): here it never does.
    h.clock.advance(60_000);
    const req: RegisterRunnerRequest = { poolId: "default", runnerId: "late", generation: 1, capacityTotal: 1, capabilities: [], sessions: [] };
    const reply = decodeJson(RegisterRunnerReply, (await h.nc.request(Subjects.register("default", "late"), encodeJson(RegisterRunnerRequest, req), { timeout: 5_000 })).data);
    expect(reply.ok && reply.value.accepted).toBe(true);
    await s.sweep();
    expect((await runner("late"))?.state).toBe("active");
    // Without any lease for a TTL plus the grace after registering, it is lost.
    h.clock.advance(31_000);
    await s.sweep();
    await waitForRunnerState("late", "lost");
  });
});

/** The tracker sees the delete marker (watch), so the clock can be moved past the grace period. */
async function waitForLeaseGone(runnerId: string): Promise<void> {
  const leases = await new Kvm(h.nc).open("runner-leases");
  const w = await leases.watch({ key: `default.${runnerId}` });
  for await (const e of w) if (e.operation !== "PUT") break;
  w.stop();
  await h.nc.flush();
}

describe("placement", () => {
  it("requirements select the runners: capabilities and minimum resources", async () => {
    await h.start();
    const inboxPlain = await dispatchInbox(h.nc, "plain");
    const inboxGpu = await dispatchInbox(h.nc, "gpu");
    await register(h.nc, { runnerId: "plain", generation: 1, capacityTotal: 5, resources: { cpuMillis: 2000, memoryBytes: 4e9, diskBytes: 1e11 } });
    await register(h.nc, { runnerId: "gpu", generation: 1, capacityTotal: 1, capabilities: ["gpu"], resources: { cpuMillis: 8000, memoryBytes: 64e9, diskBytes: 1e12 } });
    const env = await callRpc(h.nc, Api.createEnvironment, { scope: alice, body: { name: "ml", requirements: { capabilities: ["gpu"], minMemoryBytes: 32e9 } } });
    const { session } = await create(h.nc, alice, { environmentId: env.environment.id });
    expect(session.requirements).toMatchObject({ capabilities: ["gpu"], minMemoryBytes: 32e9 });
    expect(await inboxGpu.next()).toMatchObject({ type: "start", sessionId: session.id });
    // The gpu runner is full now; the next gpu session waits even though "plain" has room.
    const { session: waiting } = await create(h.nc, alice, { environmentId: env.environment.id });
    const { session: anywhere } = await create(h.nc, alice);
    expect(await inboxPlain.next()).toMatchObject({ sessionId: anywhere.id });
    expect((await get(h.nc, alice, waiting.id)).state).toBe("queued");
  });

  it("a draining or cordoned runner receives nothing new; uncordon makes it eligible again", async () => {
    await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 5 });
    const drained = await callRpc(h.nc, Api.setRunnerState, { scope: alice, runnerId: "r1", state: "draining" });
    expect(drained.runner.state).toBe("draining");
    const { session } = await create(h.nc, alice);
    await callRpc(h.nc, Api.setRunnerState, { scope: alice, runnerId: "r1", state: "cordoned" });
    expect((await get(h.nc, alice, session.id)).state).toBe("queued");
    await callRpc(h.nc, Api.setRunnerState, { scope: alice, runnerId: "r1", state: "active" });
    expect(await inbox.next()).toMatchObject({ type: "start", sessionId: session.id });
    await expect(callRpc(h.nc, Api.setRunnerState, { scope: alice, runnerId: "nope", state: "active" })).rejects.toMatchObject({ code: "not_found" });
  });

  it("a slot leaked by a scheduler killed mid-placement is repaired once its reservation left the repair window", async () => {
    const s = await h.start();
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 2 });
    const kv = await new Kvm(h.nc).open("runners");
    const entry = await kv.get("default.r1");
    const r = entry?.json<Record<string, unknown>>() ?? {};
    await kv.update("default.r1", JSON.stringify({ ...r, capacityUsed: 2, reservations: [{ at: h.clock.ms, count: 2 }] }), entry?.revision ?? 0);
    await waitForCapacityUsed(h.nc, "r1", 2);
    await s.sweep();
    expect((await runner("r1"))?.capacityUsed).toBe(2);
    h.clock.advance(31_000);
    await s.sweep();
    await waitForCapacityUsed(h.nc, "r1", 0);
  });

  it("leaked slots are repaired while placements go on: only the recent reservations stay counted", async () => {
    const s = await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 8 });
    await runningSession(h.nc, "r1", inbox);
    // Six slots leaked long ago (lost releases) and one reserved a moment ago whose session is not written yet.
    const kv = await new Kvm(h.nc).open("runners");
    const entry = await kv.get("default.r1");
    const r = entry?.json<Record<string, unknown>>() ?? {};
    await kv.update("default.r1", JSON.stringify({ ...r, capacityUsed: 8, reservations: [{ at: h.clock.ms, count: 1 }] }), entry?.revision ?? 0);
    await waitForCapacityUsed(h.nc, "r1", 8);
    await s.sweep();
    await waitForCapacityUsed(h.nc, "r1", 2);
    // And a count below what is placed is raised to it.
    const low = await kv.get("default.r1");
    await kv.update("default.r1", JSON.stringify({ ...low?.json<Record<string, unknown>>(), capacityUsed: 0 }), low?.revision ?? 0);
    await waitForCapacityUsed(h.nc, "r1", 0);
    await s.sweep();
    await waitForCapacityUsed(h.nc, "r1", 1);
  });

  it("a start that was never sent (scheduler killed after placing) is re-sent", async () => {
    const s = await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 0 });
    const { session } = await create(h.nc, alice);
    // What a scheduler killed between its placement CAS and its dispatch leaves behind:
    // the record says creating on r1, and no start was ever published.
    const kv = await new Kvm(h.nc).open("sessions");
    const entry = await kv.get(`ws1.${session.id}`);
    const placed = { ...session, state: "creating", poolId: "default", runnerId: "r1", placementGeneration: 1 };
    await kv.update(`ws1.${session.id}`, JSON.stringify(placed), entry?.revision ?? 0);
    await waitForState(h.nc, session.id, "creating");
    h.clock.advance(6_000);
    await s.sweep();
    expect(await inbox.next()).toMatchObject({ type: "start", sessionId: session.id, placementGeneration: 1 });
    expect((await get(h.nc, alice, session.id)).state).toBe("creating");
  });

  it("a running fact dropped by the fence at a re-registration: the start is sent again under the new generation, and the running the runner answers applies", async () => {
    const s = await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await create(h.nc, alice, { spec: { cmd: ["sleep", "600"] } });
    const start = await inbox.next();
    await waitForState(h.nc, session.id, "creating");
    // The runner re-registers keeping the session; its running fact of generation 1 lands after that.
    const held = { sessionId: session.id, workspaceId: session.workspaceId, placementGeneration: 1 };
    const reply = await register(h.nc, { runnerId: "r1", generation: 2, sessions: [held, { ...held, sessionId: "ses_gone" }] });
    // The reply says what the kept record shows (so the runner can state what it lacks) and what to destroy.
    expect(reply).toMatchObject({ accepted: true, kept: [{ sessionId: session.id, placementGeneration: 1, state: "creating" }], destroy: [{ sessionId: "ses_gone" }] });
    await publishFact(h.nc, factFor("r1", start, { type: "running" }));
    await factsSettled(h.nc);
    expect((await s.context.metrics.staleFacts.get()).values.reduce((n, v) => n + v.value, 0)).toBe(1);
    expect((await get(h.nc, alice, session.id)).state).toBe("creating");
    h.clock.advance(6_000);
    await s.sweep();
    expect(await inbox.next()).toMatchObject({ type: "start", sessionId: session.id, placementGeneration: 1, runnerGeneration: 2 });
    // What the runner answers to that start: running again under generation 2.
    await publishFact(h.nc, factFor("r1", { ...start, runnerGeneration: 2 }, { type: "running" }));
    await waitForState(h.nc, session.id, "running");
  });
;
});

describe("a runner's word about another runner", () => {
  const total = async (c: { get(): Promise<{ values: { value: number; labels: Record<string, string | number> }[] }> }, label?: [string, string]) =>
    (await c.get()).values.filter((v) => !label || v.labels[label[0]] === label[1]).reduce((n, v) => n + v.value, 0);

  it("a fact published under one runner's subject that names another runner is dropped and counted, never applied", async () => {
    const s = await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 1 });
    await register(h.nc, { runnerId: "r2", generation: 1, capacityTotal: 1 });
    const { session, start } = await runningSession(h.nc, "r1", inbox);
    // r2's credentials may publish only on r2's subject: it speaks for r1, with r1's generations.
    const forged = factFor("r1", start, { type: "exited", exitCode: 0 });
    await jetstream(h.nc).publish(Subjects.runnerEvents("default", "r2"), encodeJson(RunnerFact, forged));
    await factsSettled(h.nc);
    expect((await get(h.nc, alice, session.id)).state).toBe("running");
    expect(await total(s.context.metrics.foreignFacts)).toBe(1);
    // The same fact on r1's own subject is r1's word, and applies.
    await publishFact(h.nc, forged);
    expect((await waitForState(h.nc, session.id, "dead")).childExitCode).toBe(0);
  });

  it("an environment snapshot is recorded only from the runner that booted a session of that environment", async () => {
    const s = await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 1 });
    await register(h.nc, { runnerId: "r2", generation: 1, capacityTotal: 1 });
    const { start } = await runningSession(h.nc, "r1", inbox);
    const snapshot = { environmentId: "env_x", setupHash: "h", checkpoint: { ...checkpoint, ref: "env-snapshots/default/env_x/h" }, sealKey: testSealKey };
    // r2 names r1's placement from its own subject (foreign), then itself (not placed there).
    await jetstream(h.nc).publish(Subjects.runnerEvents("default", "r2"), encodeJson(RunnerFact, factFor("r1", start, { type: "env_snapshot", ...snapshot })));
    await publishFact(h.nc, factFor("r2", start, { type: "env_snapshot", ...snapshot }));
    await factsSettled(h.nc);
    expect(await total(s.context.metrics.foreignFacts)).toBe(1);
    expect(await total(s.context.metrics.staleFacts, ["type", "env_snapshot"])).toBe(1);
    expect(await s.context.sealKeys.get(snapshot.checkpoint.ref)).toBeUndefined();
  });

  /** Publishes a registration, then one that is answered: the scheduler handles its registrations in order, so the first was judged. */
  async function judged(subject: string, req: RegisterRunnerRequest): Promise<void> {
    h.nc.publish(subject, encodeJson(RegisterRunnerRequest, req), { reply: `${inboxPrefixOf(runnerNatsUser("default", "r1"))}.forged` });
    const own = `${inboxPrefixOf(runnerNatsUser("default", "r9"))}.reply`;
    const answered = h.nc.subscribe(own, { max: 1 });
    const r9: RegisterRunnerRequest = { runnerId: "r9", poolId: "default", generation: 1, capacityTotal: 0, capabilities: [], sessions: [] };
    h.nc.publish(Subjects.register("default", "r9"), encodeJson(RegisterRunnerRequest, r9), { reply: own });
    for await (const m of answered) expect(decodeJson(RegisterRunnerReply, m.data)).toMatchObject({ ok: true, value: { accepted: true } });
  }

  it("a registration whose body names another runner than its subject is refused without effect", async () => {
    const s = await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 1 });
    const { session } = await runningSession(h.nc, "r1", inbox);
    // r2 claims r1's next generation, holding nothing: accepted, it would end r1's session.
    await judged(Subjects.register("default", "r2"), { runnerId: "r1", poolId: "default", generation: 2, capacityTotal: 1, capabilities: [], sessions: [] });
    expect(await total(s.context.metrics.registrationsRefused, ["reason", "subject"])).toBe(1);
    expect((await runner("r1"))?.generation).toBe(1);
    expect((await get(h.nc, alice, session.id)).state).toBe("running");
  });

  it("a malformed registration is counted invalid and changes nothing; a fact on a subject that is no runner's events subject is foreign", async () => {
    const s = await h.start();
    h.nc.publish(Subjects.register("default", "r1"), "{not json");
    h.nc.publish(Subjects.register("default", "r1"), JSON.stringify({ runnerId: "r1", poolId: "default", generation: 0 }));
    await judged(Subjects.register("default", "r2"), { runnerId: "r2", poolId: "default", generation: 1, capacityTotal: 0, capabilities: [], sessions: [] });
    expect(await total(s.context.bus.invalidMessages, ["subject", Subjects.registerAll])).toBe(2);
    expect(await runner("r1")).toBeUndefined();
    const inbox = await dispatchInbox(h.nc, "r3");
    await register(h.nc, { runnerId: "r3", generation: 1, capacityTotal: 1 });
    const { session, start } = await runningSession(h.nc, "r3", inbox);
    await jetstream(h.nc).publish("paddock.runner.default.r3.other", encodeJson(RunnerFact, factFor("r3", start, { type: "exited", exitCode: 0 })));
    await factsSettled(h.nc);
    expect(await total(s.context.metrics.foreignFacts)).toBe(1);
    expect((await get(h.nc, alice, session.id)).state).toBe("running");
  });

  it("with per-principal credentials a registration is answered only to the registering runner's own inbox", async () => {
    const s = await h.start({ PADDOCK_NATS_USER: "scheduler" });
    await judged(Subjects.register("default", "r2"), { runnerId: "r2", poolId: "default", generation: 1, capacityTotal: 1, capabilities: [], sessions: [] });
    expect(await total(s.context.metrics.registrationsRefused, ["reason", "inbox"])).toBe(1);
    expect(await runner("r2")).toBeUndefined();
  });
});

describe("runner records", () => {
  it("lastSeenAt follows the lease renewals (the lease entry's time), without a runner-record write per renewal", async () => {
    await h.start();
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const records = await new Kvm(h.nc).open("runners");
    const before = await records.get("default.r1");
    const leases = await new Kvm(h.nc).open("runner-leases");
    for (let i = 0; i < 3; i++) await leases.put("default.r1", JSON.stringify({ runnerId: "r1", poolId: "default", generation: 1, renewedAt: i }));
    const renewedAt = (await leases.get("default.r1"))?.created.getTime();
    // The scheduler's lease watch delivers the renewal; its list answers from then on.
    let seen = (await runner("r1"))?.lastSeenAt;
    while (seen !== renewedAt) seen = await new Promise<number | undefined>((resolve) => setTimeout(() => void runner("r1").then((r) => resolve(r?.lastSeenAt)), 10));
    expect(seen).toBeGreaterThan(before?.json<{ lastSeenAt: number }>().lastSeenAt ?? Infinity);
    expect((await records.get("default.r1"))?.revision).toBe(before?.revision);
  });
});
