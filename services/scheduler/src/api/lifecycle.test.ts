import { describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Api, Presence, RunnerActivity, snapshotOutcome, Streams, Subjects, type Checkpoint, type Scope } from "@paddock/contracts";
import { tokenKey } from "@paddock/contracts/token-key";
import { callRpc, encodeJson } from "@paddock/bus";
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
  testSealKey,
  factsSettled,
  revisionsOf,
  serviceTokenOf,
  tokenRevoked,
} from "../testing/testkit.ts";
import { RUNNER_FACTS_CONSUMER } from "../state/fact-backlog.ts";

let h: SchedulerHarness;
useHarness((started) => (h = started));

const checkpointOf = (requestId: string): Checkpoint => ({ ref: `checkpoints/ws1/x/1-${requestId}`, format: "tar+gzip", capabilities: ["portable"] });

/** A running session on runner r1 with two apps, `web` and `worker`, and r1's dispatch inbox. */
async function runningWithApps() {
  await h.start();
  const inbox = await dispatchInbox(h.nc, "r1");
  await register(h.nc, { runnerId: "r1", generation: 1 });
  const apps = [
    { name: "web", cmd: ["sleep", "100"] },
    { name: "worker", cmd: ["sleep", "100"] },
  ];
  return { inbox, ...(await runningSession(h.nc, "r1", inbox, { spec: { apps } })) };
}

async function capacityUsed(runnerId: string): Promise<number> {
  const page = await callRpc(h.nc, Api.listRunners, { scope: alice, limit: 50 });
  return page.runners.find((r) => r.id === runnerId)?.capacityUsed ?? -1;
}

describe("suspend and resume", () => {
  it("warm: stops in place keeping the slot, and resume continues it", async () => {
    await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await runningSession(h.nc, "r1", inbox);
    const suspending = callRpc(h.nc, Api.suspendSession, { scope: alice, sessionId: session.id, warm: true });
    const cmd = await inbox.next();
    expect(cmd).toMatchObject({ type: "suspend", warm: true, placementGeneration: 1 });
    await publishFact(h.nc, factFor("r1", cmd, { type: "suspended", warm: true }));
    expect((await suspending).session).toMatchObject({ state: "suspended_warm" });
    expect((await suspending).session.pending).toBeUndefined();
    expect(await capacityUsed("r1")).toBe(1);

    const resuming = callRpc(h.nc, Api.resumeSession, { scope: alice, sessionId: session.id });
    const resume = await inbox.next();
    expect(resume).toMatchObject({ type: "resume" });
    await publishFact(h.nc, factFor("r1", resume, { type: "resumed" }));
    expect((await resuming).session).toMatchObject({ state: "running", placementGeneration: 1 });
  });

  it("a resume while another is under way joins it: one command to the runner, both callers see the one request", async () => {
    // A short operation wait: a runner that has not answered yet returns the pending record, which names the request.
    await h.start({ PADDOCK_OPERATION_WAIT_MS: "200" });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await runningSession(h.nc, "r1", inbox);
    const suspending = callRpc(h.nc, Api.suspendSession, { scope: alice, sessionId: session.id, warm: true });
    await publishFact(h.nc, factFor("r1", await inbox.next(), { type: "suspended", warm: true }));
    await suspending;

    const first = await callRpc(h.nc, Api.resumeSession, { scope: alice, sessionId: session.id });
    const resume = await inbox.next();
    if (resume.type !== "resume") throw new Error(`expected a resume, got ${resume.type}`);
    expect(first.session.pending).toMatchObject({ op: "resume_warm", requestId: resume.requestId });
    const second = await callRpc(h.nc, Api.resumeSession, { scope: alice, sessionId: session.id });
    expect(second.session.pending).toMatchObject({ op: "resume_warm", requestId: resume.requestId });
    expect(await inbox.remaining()).toBe(0);
    await publishFact(h.nc, factFor("r1", resume, { type: "resumed" }));
    expect(await waitForState(h.nc, session.id, "running")).toMatchObject({ state: "running" });
  });

  it("cold: checkpoints and frees the slot; resume places it again on another runner and restores", async () => {
    await h.start();
    const inbox1 = await dispatchInbox(h.nc, "r1");
    const inbox2 = await dispatchInbox(h.nc, "r2");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await runningSession(h.nc, "r1", inbox1);
    const suspending = callRpc(h.nc, Api.suspendSession, { scope: alice, sessionId: session.id, warm: false });
    const cmd = await inbox1.next();
    expect(cmd).toMatchObject({ type: "suspend", warm: false });
    const checkpoint = checkpointOf("cold1");
    await publishFact(h.nc, factFor("r1", cmd, { type: "suspended", warm: false, checkpoint }));
    expect((await suspending).session).toMatchObject({ state: "suspended_cold", checkpoint });
    await waitForCapacityUsed(h.nc, "r1", 0);

    // r1 fills up with another session; r2 joins the pool; resume lands on r2.
    await runningSession(h.nc, "r1", inbox1);
    await register(h.nc, { runnerId: "r2", generation: 1 });
    const resuming = callRpc(h.nc, Api.resumeSession, { scope: alice, sessionId: session.id });
    const start = await inbox2.next();
    expect(start).toMatchObject({ type: "start", sessionId: session.id, trigger: "resume", restore: checkpoint, placementGeneration: 2 });
    await publishFact(h.nc, factFor("r2", start, { type: "running" }));
    expect((await resuming).session).toMatchObject({ state: "running", runnerId: "r2", placementGeneration: 2 });
    // The superseded sandbox's late report is fenced.
    await publishFact(h.nc, factFor("r1", cmd, { type: "exited", exitCode: 1 }));
    await publishFact(h.nc, factFor("r2", start, { type: "exited", exitCode: 0 }));
    expect((await waitForState(h.nc, session.id, "dead")).runnerId).toBe("r2");
  });

  it("snapshot returns the checkpoint and leaves the session running", async () => {
    await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await runningSession(h.nc, "r1", inbox);
    const snapping = callRpc(h.nc, Api.snapshotSession, { scope: alice, sessionId: session.id });
    const cmd = await inbox.next();
    if (cmd.type !== "checkpoint") throw new Error(`expected checkpoint, got ${cmd.type}`);
    await publishFact(h.nc, factFor("r1", cmd, { type: "checkpointed", requestId: cmd.requestId, checkpoint: checkpointOf(cmd.requestId), sealKey: testSealKey }));
    const { checkpoint, session: after } = await snapping;
    expect(checkpoint).toEqual(checkpointOf(cmd.requestId));
    expect(after.state).toBe("running");
  });

  it("a snapshot the runner finishes after the call's wait answers its request, not a failure; the record keeps it past a later checkpoint", async () => {
    await h.start({ PADDOCK_OPERATION_WAIT_MS: "200" });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await runningSession(h.nc, "r1", inbox);
    const answer = await callRpc(h.nc, Api.snapshotSession, { scope: alice, sessionId: session.id });
    const cmd = await inbox.next();
    if (cmd.type !== "checkpoint") throw new Error(`expected checkpoint, got ${cmd.type}`);
    expect(answer.checkpoint).toBeUndefined();
    expect(answer.requestId).toBe(cmd.requestId);
    expect(snapshotOutcome(answer.session, answer.requestId)).toEqual({ status: "pending" });

    await publishFact(h.nc, factFor("r1", cmd, { type: "checkpointed", requestId: cmd.requestId, checkpoint: checkpointOf(cmd.requestId), sealKey: testSealKey }));
    const taken = await untilSession(h.nc, session.id, (x) => x.snapshot !== undefined);
    expect(snapshotOutcome(taken, cmd.requestId)).toEqual({ status: "taken", checkpoint: checkpointOf(cmd.requestId) });
    // A periodic checkpoint (not a client's request) moves `checkpoint` on; the snapshot stays findable by its request.
    await publishFact(h.nc, factFor("r1", cmd, { type: "checkpointed", requestId: "chk_1", checkpoint: checkpointOf("chk_1"), sealKey: testSealKey }));
    const later = await untilSession(h.nc, session.id, (x) => x.checkpoint?.ref === checkpointOf("chk_1").ref);
    expect(snapshotOutcome(later, cmd.requestId)).toEqual({ status: "taken", checkpoint: checkpointOf(cmd.requestId) });
    expect(snapshotOutcome(later, "req_never")).toEqual({ status: "unknown" });
  });

  it("refuses what the state machine does not allow, as a typed conflict that changes nothing", async () => {
    await h.start();
    const { session } = await create(h.nc, alice);
    await expect(callRpc(h.nc, Api.suspendSession, { scope: alice, sessionId: session.id, warm: true })).rejects.toMatchObject({ code: "conflict" });
    await expect(callRpc(h.nc, Api.snapshotSession, { scope: alice, sessionId: session.id })).rejects.toMatchObject({ code: "conflict" });
    await callRpc(h.nc, Api.deleteSession, { scope: alice, sessionId: session.id });
    await expect(callRpc(h.nc, Api.resumeSession, { scope: alice, sessionId: session.id })).rejects.toMatchObject({ code: "conflict" });
    expect((await get(h.nc, alice, session.id)).state).toBe("canceled");
  });

  it("concurrent suspend and delete of one session end destroyed, with the slot count matching what holds slots", async () => {
    await h.start({ PADDOCK_OPERATION_WAIT_MS: "200" });
    await h.start({ PADDOCK_OPERATION_WAIT_MS: "200" });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 2 });
    const { session, start } = await runningSession(h.nc, "r1", inbox);
    const { session: other } = await runningSession(h.nc, "r1", inbox);
    const results = await Promise.allSettled([
      callRpc(h.nc, Api.suspendSession, { scope: alice, sessionId: session.id, warm: false }),
      callRpc(h.nc, Api.deleteSession, { scope: alice, sessionId: session.id }),
    ]);
    expect(results[1]).toMatchObject({ status: "fulfilled" });
    // The runner's late answer to the suspend cannot revive or re-release a destroyed session.
    await publishFact(h.nc, factFor("r1", start, { type: "suspended", warm: false, checkpoint: checkpointOf("late") }));
    expect((await get(h.nc, alice, session.id)).state).toBe("destroyed");
    await waitForCapacityUsed(h.nc, "r1", 1);
    expect((await get(h.nc, alice, other.id)).state).toBe("running");
  });
});

describe("timeouts: nothing is stuck forever", () => {
  it("creating → failed when the runner never starts the sandbox, and the slot comes back", async () => {
    const s = await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await create(h.nc, alice);
    await inbox.next();
    h.clock.advance(121_000);
    await s.sweep();
    const failed = await waitForState(h.nc, session.id, "failed");
    expect(failed.error).toBe("runner did not start the sandbox within 120 s");
    await waitForCapacityUsed(h.nc, "r1", 0);
    expect(failed.lastFact.action).toBe("timeout");
  });

  it("creating outlives its timeout while its runner's facts wait to be applied, and their start lands; not past twice the timeout", async () => {
    const s = await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 2 });
    const jsm = await jetstreamManager(h.nc);
    // A paused facts consumer: what a consumer whose leader moved looks like from here.
    await jsm.consumers.pause(Streams.runner, RUNNER_FACTS_CONSUMER, new Date(Date.now() + 60_000));
    try {
      const late = (await create(h.nc, alice)).session;
      const lateStart = await inbox.next();
      await publishFact(h.nc, factFor("r1", lateStart, { type: "running" }));
      h.clock.advance(121_000);
      await s.sweep();
      expect((await get(h.nc, alice, late.id)).state).toBe("creating");
      await jsm.consumers.resume(Streams.runner, RUNNER_FACTS_CONSUMER);
      await waitForState(h.nc, late.id, "running");

      await jsm.consumers.pause(Streams.runner, RUNNER_FACTS_CONSUMER, new Date(Date.now() + 60_000));
      const stuck = (await create(h.nc, alice)).session;
      const stuckStart = await inbox.next();
      await publishFact(h.nc, factFor("r1", stuckStart, { type: "running" }));
      h.clock.advance(121_000);
      await s.sweep();
      expect((await get(h.nc, alice, stuck.id)).state).toBe("creating");
      h.clock.advance(120_000);
      await s.sweep();
      expect((await waitForState(h.nc, stuck.id, "failed")).error).toBe("runner did not start the sandbox within 120 s");
    } finally {
      await jsm.consumers.resume(Streams.runner, RUNNER_FACTS_CONSUMER);
    }
  });

  it("queued with no eligible runner → failed with a reason", async () => {
    const s = await h.start({ PADDOCK_QUEUED_TIMEOUT_MS: "60000" });
    const { session } = await create(h.nc, alice);
    h.clock.advance(30_000);
    await s.sweep();
    expect((await get(h.nc, alice, session.id)).state).toBe("queued");
    h.clock.advance(31_000);
    await s.sweep();
    expect((await waitForState(h.nc, session.id, "failed")).error).toMatch(/no eligible runner/);
  });

  it("a suspend the runner never confirms is abandoned and the session keeps running", async () => {
    const s = await h.start({ PADDOCK_OPERATION_WAIT_MS: "50" });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await runningSession(h.nc, "r1", inbox);
    const answer = await callRpc(h.nc, Api.suspendSession, { scope: alice, sessionId: session.id, warm: true });
    expect(answer.session.pending?.op).toBe("suspend_warm");
    h.clock.advance(61_000);
    await s.sweep();
    const cleared = await untilSession(h.nc, session.id, (x) => x.pending === undefined);
    expect(cleared.state).toBe("running");
  });
});

describe("policies", () => {
  it("terminal records expire after their TTL, cold-suspended sessions are destroyed after theirs", async () => {
    const s = await h.start({ PADDOCK_TERMINAL_TTL_MS: "1000", PADDOCK_SUSPENDED_TTL_MS: "5000" });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session: gone } = await create(h.nc, alice);
    await inbox.next();
    await callRpc(h.nc, Api.deleteSession, { scope: alice, sessionId: gone.id });
    expect(await inbox.next()).toMatchObject({ type: "destroy", sessionId: gone.id });
    const { session: cold } = await runningSession(h.nc, "r1", inbox);
    const suspending = callRpc(h.nc, Api.suspendSession, { scope: alice, sessionId: cold.id, warm: false });
    const cmd = await inbox.next();
    await publishFact(h.nc, factFor("r1", cmd, { type: "suspended", warm: false, checkpoint: checkpointOf("c") }));
    await suspending;
    h.clock.advance(2_000);
    await s.sweep();
    await expect(get(h.nc, alice, gone.id)).rejects.toMatchObject({ code: "not_found" });
    expect((await get(h.nc, alice, cold.id)).state).toBe("suspended_cold");
    h.clock.advance(4_000);
    await s.sweep();
    expect((await waitForState(h.nc, cold.id, "destroyed")).lastFact.action).toBe("expire");
  });

  it("an idle watch session is suspended cold; an attached one is not", async () => {
    const s = await h.start({ PADDOCK_IDLE_MS: "10000", PADDOCK_OPERATION_WAIT_MS: "50" });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 2 });
    const { session: idle } = await runningSession(h.nc, "r1", inbox, { mode: "watch" });
    const { session: watched } = await runningSession(h.nc, "r1", inbox, { mode: "watch" });
    s.context.presence.record({ sessionId: watched.id, workspaceId: "ws1", clients: 1 });
    // A heartbeat on the bus is recorded the same way (and a malformed one is counted, not fatal).
    h.nc.publish(Subjects.presence(watched.id), encodeJson(Presence, { sessionId: watched.id, workspaceId: "ws1", clients: 1 }));
    h.nc.publish(Subjects.presence(watched.id), "garbage");
    await h.nc.flush();
    h.clock.advance(11_000);
    s.context.presence.record({ sessionId: watched.id, workspaceId: "ws1", clients: 1 });
    await s.sweep();
    const cmd = await inbox.next();
    expect(cmd).toMatchObject({ type: "suspend", warm: false, sessionId: idle.id });
  });

  it("the idle window runs from real activity: checkpoints do not reset it, its own runner's output does", async () => {
    const s = await h.start({ PADDOCK_IDLE_MS: "10000", PADDOCK_CHECKPOINT_INTERVAL_MS: "5000", PADDOCK_OPERATION_WAIT_MS: "50" });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 2 });
    const { session: quiet } = await runningSession(h.nc, "r1", inbox, { mode: "watch" });
    const { session: chatty } = await runningSession(h.nc, "r1", inbox, { mode: "watch" });
    await s.sweep();
    // Periodic checkpoints write both records at +6 s.
    h.clock.advance(6_000);
    await s.sweep();
    for (let i = 0; i < 2; i++) {
      const cmd = await inbox.next();
      if (cmd.type !== "checkpoint") throw new Error(`expected a checkpoint, got ${cmd.type}`);
      await publishFact(h.nc, factFor("r1", cmd, { type: "checkpointed", requestId: cmd.requestId, checkpoint: checkpointOf(cmd.requestId), sealKey: testSealKey }));
    }
    await untilSession(h.nc, quiet.id, (x) => x.checkpointedAt !== undefined);
    await untilSession(h.nc, chatty.id, (x) => x.checkpointedAt !== undefined);
    // Output at +6 s: r1 reports the chatty session; other runners' reports about the quiet one do not count.
    h.nc.publish(Subjects.activity("default", "r2"), encodeJson(RunnerActivity, { poolId: "default", runnerId: "r2", sessions: [quiet.id] }));
    // A body speaking for r1 on r2's subject is refused (and so is garbage).
    h.nc.publish(Subjects.activity("default", "r2"), encodeJson(RunnerActivity, { poolId: "default", runnerId: "r1", sessions: [quiet.id] }));
    h.nc.publish(Subjects.activity("default", "r1"), "garbage");
    h.nc.publish(Subjects.activity("default", "r1"), encodeJson(RunnerActivity, { poolId: "default", runnerId: "r1", sessions: [chatty.id] }));
    const chattyRecord = await get(h.nc, alice, chatty.id);
    while (s.context.presence.lastActiveAt(chattyRecord) === undefined) await h.nc.flush();
    h.clock.advance(6_000);
    await s.sweep();
    // 12 s after it started running, 6 s after its checkpoint: the quiet one is idle.
    expect((await untilSession(h.nc, quiet.id, (x) => x.pending !== undefined)).pending?.op).toBe("suspend_cold");
    // The chatty one is suspended only once 10 s passed after its output, by a later sweep.
    h.clock.advance(5_000);
    const thirdSweepAt = h.clock.ms;
    await s.sweep();
    const pending = (await untilSession(h.nc, chatty.id, (x) => x.pending !== undefined)).pending;
    expect(pending?.op).toBe("suspend_cold");
    expect(pending?.requestedAt).toBeGreaterThan(thirdSweepAt);
  });

  it("running sessions are checkpointed periodically, once per interval across replicas", async () => {
    const a = await h.start({ PADDOCK_CHECKPOINT_INTERVAL_MS: "60000" });
    const b = await h.start({ PADDOCK_CHECKPOINT_INTERVAL_MS: "60000" });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await runningSession(h.nc, "r1", inbox);
    h.clock.advance(61_000);
    await Promise.all([a.sweep(), b.sweep()]);
    const cmd = await inbox.next();
    expect(cmd).toMatchObject({ type: "checkpoint", sessionId: session.id });
    const jsm = await jetstreamManager(h.nc);
    const info = await jsm.streams.info(Streams.dispatch, { subjects_filter: Subjects.dispatch("default", "r1") });
    // start + one checkpoint: the second replica's identical command was deduplicated.
    expect(info.state.subjects?.[Subjects.dispatch("default", "r1")]).toBe(2);
    if (cmd.type !== "checkpoint") throw new Error("unreachable");
    await publishFact(h.nc, factFor("r1", cmd, { type: "checkpointed", requestId: cmd.requestId, checkpoint: checkpointOf(cmd.requestId), sealKey: testSealKey }));
    expect((await untilSession(h.nc, session.id, (x) => x.checkpoint !== undefined)).checkpoint?.ref).toContain(cmd.requestId);
  });

  it("at the record limit the oldest reclaimable record gives way; live sessions never do", async () => {
    await h.start({ PADDOCK_MAX_SESSIONS_PER_WORKSPACE: "2" });
    const first = (await create(h.nc, alice)).session;
    const second = (await create(h.nc, alice)).session;
    await expect(create(h.nc, alice)).rejects.toMatchObject({ code: "conflict" });
    await callRpc(h.nc, Api.deleteSession, { scope: alice, sessionId: first.id });
    const third = (await create(h.nc, alice)).session;
    await expect(get(h.nc, alice, first.id)).rejects.toMatchObject({ code: "not_found" });
    expect((await get(h.nc, alice, second.id)).state).toBe("queued");
    expect((await get(h.nc, alice, third.id)).state).toBe("queued");
  });
});

describe("quotas", () => {
  const bob: Scope = { workspaceId: "ws1", actor: { id: "bob", kind: "user" } };

  /** A session of `scope` brought to suspended_cold on r1. */
  async function coldSession(scope: Scope, inbox: Awaited<ReturnType<typeof dispatchInbox>>) {
    const { session } = await create(h.nc, scope);
    const start = await inbox.next();
    await publishFact(h.nc, factFor("r1", start, { type: "running" }));
    await waitForState(h.nc, session.id, "running");
    const suspending = callRpc(h.nc, Api.suspendSession, { scope, sessionId: session.id, warm: false });
    const cmd = await inbox.next();
    await publishFact(h.nc, factFor("r1", cmd, { type: "suspended", warm: false, checkpoint: checkpointOf(session.id) }));
    expect((await suspending).session.state).toBe("suspended_cold");
    return session;
  }

  it("a user at the per-user limit gets a conflict naming it; another user still creates", async () => {
    await h.start({ PADDOCK_MAX_SESSIONS_PER_USER: "2", PADDOCK_MAX_SESSIONS_PER_WORKSPACE: "10" });
    await create(h.nc, alice);
    await create(h.nc, alice);
    await expect(create(h.nc, alice)).rejects.toMatchObject({ code: "conflict", message: expect.stringContaining("limit of 2 sessions per user") });
    expect((await create(h.nc, bob)).session.creatorId).toBe("bob");
  });

  it("reaching the workspace limit never destroys another user's suspended session: the create is a conflict naming the limit", async () => {
    await h.start({ PADDOCK_MAX_SESSIONS_PER_WORKSPACE: "2" });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const bobs = await coldSession(bob, inbox);
    await create(h.nc, alice);
    await expect(create(h.nc, alice)).rejects.toMatchObject({ code: "conflict", message: expect.stringContaining("limit of 2 sessions") });
    expect((await get(h.nc, bob, bobs.id)).state).toBe("suspended_cold");
    // Bob's own create may reclaim his own suspended session.
    await create(h.nc, bob);
    await expect(get(h.nc, bob, bobs.id)).rejects.toMatchObject({ code: "not_found" });
  });

  it("a dead session evicted at the limit is torn down on its runner at once", async () => {
    await h.start({ PADDOCK_MAX_SESSIONS_PER_WORKSPACE: "1" });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session, start } = await runningSession(h.nc, "r1", inbox);
    await publishFact(h.nc, factFor("r1", start, { type: "exited", exitCode: 0 }));
    await waitForState(h.nc, session.id, "dead");
    await create(h.nc, alice);
    expect(await inbox.next()).toMatchObject({ type: "destroy", sessionId: session.id, placementGeneration: 1 });
    await expect(get(h.nc, alice, session.id)).rejects.toMatchObject({ code: "not_found" });
  });
});

describe("one-shot, recycle, children, apps", () => {
  it("a one-shot session is released (destroyed, torn down) as soon as its command exits", async () => {
    await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session, start } = await runningSession(h.nc, "r1", inbox, { oneShot: true });
    await publishFact(h.nc, factFor("r1", start, { type: "exited", exitCode: 4 }));
    const done = await waitForState(h.nc, session.id, "destroyed");
    expect(done.childExitCode).toBe(4);
    expect(await inbox.next()).toMatchObject({ type: "destroy", sessionId: session.id });
  });

  it("a one-shot's exit that overtakes its running fact commits the start it proves, then the exit; the late running fact changes nothing", async () => {
    const s = await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await create(h.nc, alice, { spec: { cmd: ["true"] }, oneShot: true });
    const start = await inbox.next();
    await waitForState(h.nc, session.id, "creating");
    await publishFact(h.nc, factFor("r1", start, { type: "exited", exitCode: 5 }));
    const done = await waitForState(h.nc, session.id, "destroyed");
    expect(done.childExitCode).toBe(5);
    const actions = (await revisionsOf(h.nc, session.id)).map((r) => `${r.state}:${r.lastFact.action}:${r.lastFact.actorId}`);
    expect(actions.slice(-2)).toEqual(["running:start:r1", "destroyed:exit:r1"]);
    // The running fact, redelivered after the exit, is a duplicate: no revision, not counted as illegal.
    const before = await revisionsOf(h.nc, session.id);
    await publishFact(h.nc, factFor("r1", start, { type: "running" }));
    await factsSettled(h.nc);
    expect(await revisionsOf(h.nc, session.id)).toEqual(before);
    expect((await s.context.metrics.illegalFacts.get()).values.reduce((n, v) => n + v.value, 0)).toBe(0);
  });

  it("recycle releases the session and creates a fresh one with the same spec and a new id", async () => {
    await h.start();
    const { session } = await create(h.nc, alice, { name: "worker", spec: { cmd: ["echo", "x"] } });
    const { released, session: fresh } = await callRpc(h.nc, Api.recycleSession, { scope: alice, sessionId: session.id });
    expect(released).toMatchObject({ id: session.id, state: "canceled" });
    expect(fresh.id).not.toBe(session.id);
    expect(fresh).toMatchObject({ name: "worker", spec: { cmd: ["echo", "x"] }, state: "queued" });
  });

  it("a session's token creates children; ending the parent ends them; the token is revoked", async () => {
    await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session: parent, start } = await runningSession(h.nc, "r1", inbox);
    const token = await serviceTokenOf(h.nc, start, "r1");
    const tokens = await new Kvm(h.nc).open("tokens");
    const record = await tokens.get(tokenKey(token));
    expect(record?.json()).toMatchObject({ workspaceId: "ws1", sessionId: parent.id, actor: { id: parent.id, kind: "service" } });

    const asParent: Scope = { workspaceId: "ws1", actor: { id: parent.id, kind: "service" }, sessionId: parent.id };
    const child = (await create(h.nc, asParent)).session;
    expect(child.parentId).toBe(parent.id);
    await expect(create(h.nc, asParent, { parentId: "ses_other" })).rejects.toMatchObject({ code: "invalid" });
    const roster = await callRpc(h.nc, Api.listSessions, { scope: alice, limit: 50, includeTerminal: false, parentId: parent.id });
    expect(roster.sessions.map((s) => s.id)).toEqual([child.id]);

    await callRpc(h.nc, Api.deleteSession, { scope: alice, sessionId: parent.id });
    expect((await waitForState(h.nc, child.id, "canceled")).id).toBe(child.id);
    await untilSession(h.nc, parent.id, (s) => s.state === "destroyed");
    await tokenRevoked(h.nc, token);
  });

  it("restarts one app and records each app generation without touching the session state", async () => {
    const { inbox, session, start } = await runningWithApps();
    await expect(callRpc(h.nc, Api.restartApp, { scope: alice, sessionId: session.id, app: "nope" })).rejects.toMatchObject({ code: "not_found" });
    const restarting = callRpc(h.nc, Api.restartApp, { scope: alice, sessionId: session.id, app: "web" });
    const cmd = await inbox.next();
    expect(cmd).toMatchObject({ type: "restart_app", app: "web", trigger: "manual" });
    if (cmd.type !== "restart_app") throw new Error("unreachable");
    await publishFact(h.nc, factFor("r1", start, { type: "app", app: "web", run: { generation: 1, phase: "completed", trigger: "initial", exitCode: 0, startedAt: 1, endedAt: 2 }, durationMs: 1 }));
    await publishFact(h.nc, factFor("r1", start, { type: "app", app: "web", requestId: cmd.requestId, run: { generation: 2, phase: "running", trigger: "manual", startedAt: 3 } }));
    // The answer is the record once the runner started the new generation.
    const answered = (await restarting).session;
    expect(answered.apps?.web).toMatchObject({ generation: 2, phase: "running", trigger: "manual" });
    expect(answered.pending).toBeUndefined();
    expect(answered.state).toBe("running");
    expect(answered.lastFact).toMatchObject({ action: "run.started", run: { app: "web", generation: 2, trigger: "manual" } });
  });

  it("a restart the runner refuses is a conflict with the runner's reason", async () => {
    await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session, start } = await runningSession(h.nc, "r1", inbox);
    const restarting = callRpc(h.nc, Api.restartApp, { scope: alice, sessionId: session.id, app: "main" });
    const cmd = await inbox.next();
    if (cmd.type !== "restart_app") throw new Error(`expected restart_app, got ${cmd.type}`);
    await publishFact(h.nc, factFor("r1", start, { type: "refused", requestId: cmd.requestId, reason: "session has exited" }));
    await expect(restarting).rejects.toMatchObject({ code: "conflict", message: expect.stringContaining("session has exited") });
    const after = await get(h.nc, alice, session.id);
    expect(after).toMatchObject({ state: "running", refusal: { requestId: cmd.requestId, op: "restart_app", reason: "session has exited" } });
    expect(after.pending).toBeUndefined();
  });
});

describe("honest answers", () => {
  it("setupHash names the setup the runner booted with, not the environment as it was when the session was created", async () => {
    await h.start();
    const env = (await callRpc(h.nc, Api.createEnvironment, { scope: alice, body: { name: "edited-while-queued", setup: "echo one" } })).environment;
    const { session } = await create(h.nc, alice, { environmentId: env.id });
    expect(session.setupHash).toBe(env.setupHash);
    // Edited while the session waits for a runner: the start carries the setup as it is now.
    const edited = (await callRpc(h.nc, Api.updateEnvironment, { scope: alice, environmentId: env.id, body: { setup: "echo two" } })).environment;
    expect(edited.setupHash).not.toBe(env.setupHash);
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const start = await inbox.next();
    if (start.type !== "start") throw new Error(`expected start, got ${start.type}`);
    expect(start.environment?.setupHash).toBe(edited.setupHash);
    await publishFact(h.nc, factFor("r1", start, { type: "running", setupHash: edited.setupHash }));
    expect((await waitForState(h.nc, session.id, "running")).setupHash).toBe(edited.setupHash);
  });

  it("a warm → cold suspend the runner refuses is a conflict with its reason, and the record stays suspended_warm", async () => {
    await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await runningSession(h.nc, "r1", inbox);
    const warm = callRpc(h.nc, Api.suspendSession, { scope: alice, sessionId: session.id, warm: true });
    const w = await inbox.next();
    await publishFact(h.nc, factFor("r1", w, { type: "suspended", warm: true }));
    expect((await warm).session.state).toBe("suspended_warm");

    const cold = callRpc(h.nc, Api.suspendSession, { scope: alice, sessionId: session.id, warm: false });
    const c = await inbox.next();
    if (c.type !== "suspend") throw new Error(`expected suspend, got ${c.type}`);
    expect(c.warm).toBe(false);
    await publishFact(h.nc, factFor("r1", c, { type: "refused", requestId: c.requestId, reason: "checkpoint failed: no space left" }));
    await expect(cold).rejects.toMatchObject({ code: "conflict", message: "the runner refused: checkpoint failed: no space left" });
    const after = await get(h.nc, alice, session.id);
    expect(after.state).toBe("suspended_warm");
    expect(after.pending).toBeUndefined();
    expect(await capacityUsed("r1")).toBe(1);

    // Accepted: the stopped processes are checkpointed and the slot is freed.
    const again = callRpc(h.nc, Api.suspendSession, { scope: alice, sessionId: session.id, warm: false });
    const c2 = await inbox.next();
    await publishFact(h.nc, factFor("r1", c2, { type: "suspended", warm: false, checkpoint: checkpointOf("cold2") }));
    expect((await again).session).toMatchObject({ state: "suspended_cold", checkpoint: checkpointOf("cold2") });
    await waitForCapacityUsed(h.nc, "r1", 0);
  });

  it("a cold resume numbers each app's generations on from the record's; the new generation is recorded with trigger resume", async () => {
    const { inbox, session, start } = await runningWithApps();
    await publishFact(h.nc, factFor("r1", start, { type: "app", app: "web", run: { generation: 1, phase: "running", trigger: "initial", startedAt: 1 } }));
    await publishFact(h.nc, factFor("r1", start, { type: "app", app: "web", run: { generation: 2, phase: "running", trigger: "manual", startedAt: 2 } }));
    await publishFact(h.nc, factFor("r1", start, { type: "app", app: "worker", run: { generation: 1, phase: "running", trigger: "initial", startedAt: 1 } }));
    await untilSession(h.nc, session.id, (s) => s.apps?.web?.generation === 2 && s.apps.worker !== undefined);
    const suspending = callRpc(h.nc, Api.suspendSession, { scope: alice, sessionId: session.id, warm: false });
    const cmd = await inbox.next();
    await publishFact(h.nc, factFor("r1", cmd, { type: "suspended", warm: false, checkpoint: checkpointOf("gen") }));
    await suspending;

    const resuming = callRpc(h.nc, Api.resumeSession, { scope: alice, sessionId: session.id });
    const restart = await inbox.next();
    expect(restart).toMatchObject({ type: "start", trigger: "resume", placementGeneration: 2, appGenerations: { web: 2, worker: 1 } });
    await publishFact(h.nc, factFor("r1", restart, { type: "running" }));
    await resuming;
    await publishFact(h.nc, factFor("r1", restart, { type: "app", app: "web", run: { generation: 3, phase: "running", trigger: "resume", startedAt: 9 } }));
    const after = await untilSession(h.nc, session.id, (s) => s.apps?.web?.generation === 3);
    expect(after.apps?.web).toMatchObject({ generation: 3, trigger: "resume", phase: "running" });
    expect(after.lastFact).toMatchObject({ action: "run.started", run: { app: "web", generation: 3, trigger: "resume" } });
  });
});

describe("usage", () => {
  const usage = { cpuTimeSeconds: 1.5, memoryByteSeconds: 1000, storageBytes: 42, networkBytes: 0, agentTokenCount: 0 };

  it("rides on the one fact that ends a generation and is never counted twice", async () => {
    await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 2 });
    const { session, start } = await runningSession(h.nc, "r1", inbox);
    await publishFact(h.nc, factFor("r1", start, { type: "exited", exitCode: 0, usage }));
    const dead = await waitForState(h.nc, session.id, "dead");
    expect(dead.lastFact).toMatchObject({ action: "exit", usage });
    expect(dead.usageGeneration).toBe(1);
    // A teardown report of the same generation carries the same usage again: ignored.
    await publishFact(h.nc, factFor("r1", start, { type: "destroyed", usage }));

    // Deleted while running: the runner's teardown report brings the usage, recorded once.
    const { session: other, start: start2 } = await runningSession(h.nc, "r1", inbox);
    await callRpc(h.nc, Api.deleteSession, { scope: alice, sessionId: other.id });
    await publishFact(h.nc, factFor("r1", start2, { type: "destroyed", usage }));
    await publishFact(h.nc, factFor("r1", start2, { type: "destroyed", usage }));
    const withUsage = await untilSession(h.nc, other.id, (s) => s.lastFact.action === "usage");
    expect(withUsage).toMatchObject({ state: "destroyed", usageGeneration: 1, lastFact: { usage } });
    // The first session got no second usage revision.
    expect((await get(h.nc, alice, session.id)).lastFact.action).toBe("exit");
  });
});
