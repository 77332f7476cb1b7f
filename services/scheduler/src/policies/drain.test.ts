/**
 * Draining a runner moves its sessions: each running one is cold-suspended
 * (checkpointed) and resumed on another runner of the pool, a bounded few at
 * a time, through the same fenced and audited operations a client uses.
 */
import { describe, expect, it } from "vitest";
import { Api, type Checkpoint, type Runner, type Session } from "@paddock/contracts";
import { callRpc } from "@paddock/bus";
import { untilSession } from "@paddock/testing";
import { alice, dispatchInbox, factFor, get, publishFact, register, revisionsOf, runningSession, useHarness, waitForCapacityUsed, waitForState, type SchedulerHarness } from "../testing/testkit.ts";
import { DRAIN_PARALLEL, newDrainMemory, planDrain } from "./drain.ts";

let h: SchedulerHarness;
useHarness((started) => (h = started));

const checkpointOf = (id: string): Checkpoint => ({ ref: `checkpoints/ws1/${id}/1-drain`, format: "tar+gzip", capabilities: ["portable"] });

describe("draining a runner", () => {
  it("moves each running session to another runner with its checkpoint, and leaves the drained runner empty", async () => {
    // No periodic checkpoints: the only commands are the drain's.
    const s = await h.start({ PADDOCK_CHECKPOINT_INTERVAL_MS: "0" });
    const inbox1 = await dispatchInbox(h.nc, "r1");
    const inbox2 = await dispatchInbox(h.nc, "r2");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 3 });
    const sessions: Session[] = [];
    for (let i = 0; i < 3; i++) sessions.push((await runningSession(h.nc, "r1", inbox1)).session);
    await register(h.nc, { runnerId: "r2", generation: 1, capacityTotal: 3 });
    expect((await callRpc(h.nc, Api.setRunnerState, { scope: alice, runnerId: "r1", state: "draining" })).runner.state).toBe("draining");

    // Each sweep starts at most DRAIN_PARALLEL moves on r1; the one after a move settled starts the next.
    const moved = new Set<string>();
    while (moved.size < sessions.length) {
      await s.sweep();
      const suspend = await inbox1.next();
      expect(suspend).toMatchObject({ type: "suspend", warm: false });
      await publishFact(h.nc, factFor("r1", suspend, { type: "suspended", warm: false, checkpoint: checkpointOf(suspend.sessionId) }));
      const start = await inbox2.next();
      expect(start).toMatchObject({ type: "start", sessionId: suspend.sessionId, trigger: "resume", restore: checkpointOf(suspend.sessionId), placementGeneration: 2 });
      await publishFact(h.nc, factFor("r2", start, { type: "running" }));
      await waitForState(h.nc, suspend.sessionId, "running");
      moved.add(suspend.sessionId);
    }
    expect([...moved].sort()).toEqual(sessions.map((x) => x.id).sort());
    for (const x of sessions) expect(await get(h.nc, alice, x.id)).toMatchObject({ state: "running", runnerId: "r2", placementGeneration: 2 });
    await waitForCapacityUsed(h.nc, "r1", 0);
    const r1 = (await callRpc(h.nc, Api.listRunners, { scope: alice, limit: 10 })).runners.find((r) => r.id === "r1");
    expect(r1).toMatchObject({ state: "draining", capacityUsed: 0 });

    // Audited as the scheduler's own suspend and resume, each a committed fact of the record.
    const history = await revisionsOf(h.nc, sessions[0]?.id ?? "");
    const facts = history.map((r) => `${r.lastFact.action} by ${r.lastFact.actorId}`);
    expect(facts).toContain("suspend by scheduler");
    expect(facts).toContain("suspend by r1");
    expect(facts).toContain("resume by scheduler");
  });

  it("a move its replica did not finish is finished by another replica's sweep: the record says drain", async () => {
    // A short wait: the suspending call returns before the runner settles, as when its replica dies.
    const first = await h.start({ PADDOCK_CHECKPOINT_INTERVAL_MS: "0", PADDOCK_OPERATION_WAIT_MS: "200" });
    const inbox1 = await dispatchInbox(h.nc, "r1");
    const inbox2 = await dispatchInbox(h.nc, "r2");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await runningSession(h.nc, "r1", inbox1);
    await register(h.nc, { runnerId: "r2", generation: 1 });
    await callRpc(h.nc, Api.setRunnerState, { scope: alice, runnerId: "r1", state: "draining" });
    await first.sweep();
    const suspend = await inbox1.next();
    expect(suspend).toMatchObject({ type: "suspend", warm: false, sessionId: session.id });
    await first.stop();

    const second = await h.start({ PADDOCK_CHECKPOINT_INTERVAL_MS: "0" });
    await publishFact(h.nc, factFor("r1", suspend, { type: "suspended", warm: false, checkpoint: checkpointOf(session.id) }));
    expect(await untilSession(h.nc, session.id, (x) => x.state === "suspended_cold")).toMatchObject({ stateReason: "drain" });
    await second.sweep();
    const start = await inbox2.next();
    expect(start).toMatchObject({ type: "start", sessionId: session.id, trigger: "resume", restore: checkpointOf(session.id) });
    await publishFact(h.nc, factFor("r2", start, { type: "running" }));
    const running = await waitForState(h.nc, session.id, "running");
    expect(running).toMatchObject({ runnerId: "r2" });
    // The reason went with the move: a later cold suspend by a user is not resumed by the sweep.
    expect(running.stateReason).toBeUndefined();
  });

  it("a draining runner that is lost and registers again is still draining (the operator's state outlives the loss)", async () => {
    await h.start();
    await register(h.nc, { runnerId: "r1", generation: 1 });
    await callRpc(h.nc, Api.setRunnerState, { scope: alice, runnerId: "r1", state: "draining" });
    expect(await callRpc(h.nc, Api.loseRunner, { scope: alice, poolId: "default", runnerId: "r1", reason: "test" })).toEqual({ lost: true });
    const lost = (await callRpc(h.nc, Api.listRunners, { scope: alice, limit: 10 })).runners.find((r) => r.id === "r1");
    expect(lost).toMatchObject({ state: "lost", stateBeforeLost: "draining" });
    await register(h.nc, { runnerId: "r1", generation: 2 });
    const back = (await callRpc(h.nc, Api.listRunners, { scope: alice, limit: 10 })).runners.find((r) => r.id === "r1");
    expect(back).toMatchObject({ state: "draining", generation: 2 });
    expect(back?.stateBeforeLost).toBeUndefined();
  });
});

const runner = (id: string, state: Runner["state"]): Runner => ({ id, poolId: "default", state, generation: 1, capacityUsed: 0, capacityTotal: 8, capabilities: [], registeredAt: 1, lastSeenAt: 1 });

let n = 0;
function session(runnerId: string, state: Session["state"], extra: Partial<Session> = {}): Session {
  n += 1;
  return {
    id: `s${n}`,
    workspaceId: "ws1",
    state,
    poolId: "default",
    runnerId,
    placementGeneration: 1,
    createdAt: n,
    updatedAt: n,
    lastFact: { eventId: `e${n}`, action: "start", actorId: runnerId, at: n },
    ...extra,
  } as Session;
}

describe("planDrain", () => {
  const keyOf = (s: Session) => `${s.workspaceId}.${s.id}`;
  const roomy = runner("r9", "active");

  it("moves at most DRAIN_PARALLEL sessions per draining runner at once, oldest first, and only from draining runners", () => {
    const on1 = Array.from({ length: DRAIN_PARALLEL + 2 }, () => session("r1", "running"));
    const on2 = session("r2", "running");
    const moves = planDrain([...on1, on2], keyOf, [runner("r1", "draining"), runner("r2", "active"), roomy], newDrainMemory());
    expect(moves.map((x) => x.session.id)).toEqual(on1.slice(0, DRAIN_PARALLEL).map((x) => x.id));
    expect(moves.every((x) => x.resumeAfter)).toBe(true);
  });

  it("counts suspends pending there (any replica's) and its own moves under way against the bound", () => {
    const underWay = newDrainMemory();
    const pending = session("r1", "running", { pending: { op: "suspend_cold", requestId: "q", requestedAt: 1 } });
    const mine = session("r1", "running");
    underWay.add(keyOf(mine));
    const waiting = session("r1", "running");
    expect(planDrain([pending, mine, waiting], keyOf, [runner("r1", "draining"), roomy], underWay)).toEqual([]);
  });

  it("cold-suspends a warm-suspended session without resuming it, and leaves creating sessions and other operations alone", () => {
    const warm = session("r1", "suspended_warm");
    const creating = session("r1", "creating");
    const busy = session("r1", "running", { pending: { op: "snapshot", requestId: "q", requestedAt: 1 } });
    expect(planDrain([creating, busy, warm], keyOf, [runner("r1", "draining"), roomy], newDrainMemory())).toEqual([{ session: warm, resumeAfter: false }]);
  });

  it("moves no more running sessions than the pool has free slots on active runners, less what is queued and moving", () => {
    const on1 = Array.from({ length: 2 }, () => session("r1", "running"));
    const full = { ...runner("r2", "active"), capacityTotal: 2, capacityUsed: 2 };
    const cordoned = runner("r3", "cordoned");
    // Nowhere to go: nothing moves (a warm-suspended one still may: it needs no slot).
    const warm = session("r1", "suspended_warm");
    expect(planDrain([...on1, warm], keyOf, [runner("r1", "draining"), full, cordoned], newDrainMemory())).toEqual([{ session: warm, resumeAfter: false }]);
    // One free slot, and one session already queued for it in the pool: still nothing.
    const oneFree = { ...full, capacityUsed: 1 };
    const queued = { ...session("r2", "queued"), runnerId: undefined } as Session;
    expect(planDrain([...on1, queued], keyOf, [runner("r1", "draining"), oneFree], newDrainMemory())).toEqual([]);
    // One free slot: one move.
    expect(planDrain(on1, keyOf, [runner("r1", "draining"), oneFree], newDrainMemory()).map((m) => m.session.id)).toEqual([on1[0]?.id]);
  });
});
