import { describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { Api, Environment, Runner, Session, sessionKey, Subjects, type RunnerFact } from "@paddock/contracts";
import { callRpc } from "@paddock/bus";
import type { SchedulerContext } from "../context.ts";
import { applyRunnerFact } from "../facts/facts.ts";
import { planPass } from "./placement.ts";
import { SessionIndex } from "../state/session-index.ts";
import { makeRunner, makeSession, untilSession } from "@paddock/testing";
import { alice, create, dispatchInbox, factFor, get, publishFact, register, runningSession, useHarness, waitForCapacityUsed, type SchedulerHarness } from "../testing/testkit.ts";
import { KvView } from "../state/view.ts";

function runner(id: string, capacityTotal: number, extra: Partial<Runner> = {}): Runner {
  return makeRunner({ id, capacityTotal, registeredAt: 1, lastSeenAt: 1, ...extra });
}

function queued(n: number, extra: Partial<Session> = {}): Session {
  return makeSession({
    id: `s${String(n).padStart(3, "0")}`,
    workspaceId: "ws1",
    creatorId: "alice",
    state: "queued",
    spec: { cmd: ["true"] },
    poolId: undefined,
    runnerId: undefined,
    placementGeneration: 0,
    createdAt: n,
    updatedAt: n,
    lastFact: { eventId: `evt_${n}`, action: "create", actorId: "alice", at: n },
    ...extra,
  });
}

/** Just what planPass reads of a context: the runners view, the environments view, the sessions view. */
function planContext(runners: Runner[]): SchedulerContext {
  const runnerView = new KvView(Runner);
  runners.forEach((r, i) => runnerView.apply(`${r.poolId}.${r.id}`, { value: r, revision: i + 1 }));
  return { runnerView, sessionView: new KvView(Session), envs: { view: new KvView(Environment) } } as unknown as SchedulerContext;
}

const shape = (shares: ReturnType<typeof planPass>) => shares.map((s) => [s.runner.id, s.sessions.map((x) => x.id)]);

describe("a placement pass's plan", () => {
  it("fills the runner with the most free slots up to its share, oldest sessions first, never past free slots", () => {
    const ctx = planContext([runner("a", 10), runner("b", 12), runner("c", 3, { capacityUsed: 0 })]);
    const queue = Array.from({ length: 20 }, (_, i) => queued(i));
    const plan = shape(planPass(ctx, queue, { passSessions: 256, perRunner: 8 }));
    expect(plan).toEqual([
      ["b", queue.slice(0, 8).map((s) => s.id)],
      ["a", queue.slice(8, 16).map((s) => s.id)],
      ["c", queue.slice(16, 19).map((s) => s.id)],
    ]);
  });

  it("bounds a pass and skips runners that are full, not active, or lack what a session requires", () => {
    const ctx = planContext([runner("full", 4, { capacityUsed: 4 }), runner("drained", 9, { state: "draining" }), runner("gpu", 2, { capabilities: ["gpu"] }), runner("plain", 9)]);
    const gpu = { requirements: { capabilities: ["gpu"], minCpuMillis: 0, minMemoryBytes: 0, minDiskBytes: 0 } };
    const queue = [queued(1, gpu), queued(2, gpu), queued(3, gpu), queued(4), queued(5)];
    expect(shape(planPass(ctx, queue, { passSessions: 256, perRunner: 8 }))).toEqual([
      ["gpu", ["s001", "s002"]],
      // The third gpu session finds no room; younger sessions that fit elsewhere still go.
      ["plain", ["s004", "s005"]],
    ]);
    expect(shape(planPass(ctx, queue, { passSessions: 3, perRunner: 8 }))).toEqual([
      ["gpu", ["s001", "s002"]],
      ["plain", ["s004"]],
    ]);
  });
});

describe("session index", () => {
  it("counts records per workspace and tracks the queued set through every change", () => {
    const index = new SessionIndex();
    const view = new KvView(Session, index.onEntry);
    view.apply("ws1.s001", { value: queued(1), revision: 1 });
    view.apply("ws1.s002", { value: queued(2), revision: 2 });
    view.apply("ws2.s003", { value: queued(3, { workspaceId: "ws2" }), revision: 3 });
    expect([index.countIn("ws1"), index.countIn("ws2"), index.queuedCount]).toEqual([2, 1, 3]);
    view.apply("ws1.s001", { value: queued(1, { state: "creating" }), revision: 4 });
    // An older revision arriving late changes nothing.
    view.apply("ws1.s001", { value: queued(1), revision: 2 });
    expect([...index.queued()].map((s) => s.id).sort()).toEqual(["s002", "s003"]);
    expect(index.countIn("ws1")).toBe(2);
  });

  it("knows which records hold each runner's slots and each session's live children, through placement, cold suspend, a move and the end", () => {
    const index = new SessionIndex();
    const view = new KvView(Session, index.onEntry);
    const on = (runnerId: string) => [...index.placedOn("p", runnerId)].sort();
    view.apply("ws1.s001", { value: queued(1, { parentId: "s009" }), revision: 1 });
    view.apply("ws1.s002", { value: queued(2, { parentId: "s009" }), revision: 2 });
    expect([on("r1"), [...index.childrenOf("ws1", "s009")].sort()]).toEqual([[], ["ws1.s001", "ws1.s002"]]);
    view.apply("ws1.s001", { value: queued(1, { parentId: "s009", state: "running", poolId: "p", runnerId: "r1" }), revision: 3 });
    view.apply("ws1.s002", { value: queued(2, { parentId: "s009", state: "creating", poolId: "p", runnerId: "r1" }), revision: 4 });
    expect(on("r1")).toEqual(["ws1.s001", "ws1.s002"]);
    // Cold suspended: no slot held, still a live child. Then resumed on another runner.
    view.apply("ws1.s001", { value: queued(1, { parentId: "s009", state: "suspended_cold", poolId: "p", runnerId: "r1" }), revision: 5 });
    expect([on("r1"), on("r2")]).toEqual([["ws1.s002"], []]);
    view.apply("ws1.s001", { value: queued(1, { parentId: "s009", state: "running", poolId: "p", runnerId: "r2" }), revision: 6 });
    expect([on("r1"), on("r2")]).toEqual([["ws1.s002"], ["ws1.s001"]]);
    // The same parent id in another workspace is another parent.
    expect(index.childrenOf("ws2", "s009").size).toBe(0);
    view.apply("ws1.s002", { value: queued(2, { parentId: "s009", state: "destroyed", poolId: "p", runnerId: "r1" }), revision: 7 });
    expect([on("r1"), [...index.childrenOf("ws1", "s009")]]).toEqual([[], ["ws1.s001"]]);
  });
});

let h: SchedulerHarness;
useHarness((started) => (h = started));

async function capacityHistory(runnerId: string): Promise<number[]> {
  const kv = await new Kvm(h.nc).open("runners");
  const out: number[] = [];
  for await (const e of await kv.history({ key: `default.${runnerId}` })) if (e.operation === "PUT") out.push(Runner.parse(e.json()).capacityUsed);
  return out;
}

describe("batched placement", () => {
  it("reserves a runner's share of a pass with one compare-and-set on its record", async () => {
    await h.start();
    const created = [];
    for (let i = 0; i < 7; i++) created.push((await create(h.nc, alice)).session);
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 5 });
    const placed = await Promise.all(created.slice(0, 5).map((s) => untilSession(h.nc, s.id, (x) => x.state === "creating")));
    expect(placed.map((s) => s.runnerId)).toEqual(["r1", "r1", "r1", "r1", "r1"]);
    expect((await get(h.nc, alice, created[5]?.id ?? "")).state).toBe("queued");
    // Registration, then one reservation of all five slots.
    expect(await capacityHistory("r1")).toEqual([0, 5]);
  });

  it("never fills any runner past its capacity with two replicas placing many sessions at once", async () => {
    await h.start();
    await h.start();
    const created = await Promise.all(Array.from({ length: 30 }, () => create(h.nc, alice)));
    await Promise.all([
      register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 5 }),
      register(h.nc, { runnerId: "r2", generation: 1, capacityTotal: 5 }),
      register(h.nc, { runnerId: "r3", generation: 1, capacityTotal: 2 }),
    ]);
    const inboxes = await Promise.all(["r1", "r2", "r3"].map((r) => dispatchInbox(h.nc, r)));
    const starts = await Promise.all(inboxes.map(async (inbox, i) => Promise.all(Array.from({ length: [5, 5, 2][i] ?? 0 }, () => inbox.next()))));
    const startedIds = starts.flat().map((s) => s.sessionId);
    expect(new Set(startedIds).size).toBe(12);
    const states = await Promise.all(created.map((c) => get(h.nc, alice, c.session.id)));
    const perRunner = new Map<string, number>();
    for (const s of states) if (s.state === "creating") perRunner.set(s.runnerId ?? "", (perRunner.get(s.runnerId ?? "") ?? 0) + 1);
    expect(Object.fromEntries(perRunner)).toEqual({ r1: 5, r2: 5, r3: 2 });
    const runners = await callRpc(h.nc, Api.listRunners, { scope: alice, limit: 10 });
    expect(runners.runners.map((r) => [r.id, r.capacityUsed])).toEqual([["r1", 5], ["r2", 5], ["r3", 2]]);
    for (const r of ["r1", "r2", "r3"]) for (const used of await capacityHistory(r)) expect(used).toBeLessThanOrEqual(r === "r3" ? 2 : 5);
  });
});

describe("the fleet on /metrics", () => {
  it("counts sessions by pool and state, runner slots, and placement latency", async () => {
    const scheduler = await h.start();
    const registry = h.registryOf(scheduler);
    const inbox = await dispatchInbox(h.nc, "r1");
    const created = [];
    for (let i = 0; i < 3; i++) created.push((await create(h.nc, alice)).session);
    h.clock.advance(200);
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 2 });
    // Two starts dispatched: both placements were observed (before their dispatch).
    await inbox.next();
    await inbox.next();
    await Promise.all(created.slice(0, 2).map((c) => untilSession(h.nc, c.id, (x) => x.state === "creating")));
    const scrape = async () => (await registry.metrics()).split("\n");
    const gauge = (lines: string[], name: string) => lines.filter((l) => l.startsWith(`${name}{`)).sort();
    // The gauges read the scheduler's views, which follow KV: scraped again until they show the writes above.
    let lines = await scrape();
    for (let i = 0; i < 10_000 && !gauge(lines, "paddock_sessions").some((l) => l.includes('state="creating"} 2')); i++) {
      await new Promise((r) => setImmediate(r));
      lines = await scrape();
    }
    expect(gauge(lines, "paddock_sessions")).toEqual(['paddock_sessions{pool="default",state="creating"} 2', 'paddock_sessions{pool="none",state="queued"} 1']);
    expect(gauge(lines, "paddock_runner_slots")).toEqual([
      'paddock_runner_slots{pool="default",runner="r1",state="active",kind="total"} 2',
      'paddock_runner_slots{pool="default",runner="r1",state="active",kind="used"} 2',
    ]);
    expect(lines).toContain("paddock_placement_seconds_count 2");
    // Queued 200 ms (the test clock, which also ticks a little per read) before the runner came.
    expect(lines).toContain('paddock_placement_seconds_bucket{le="0.25"} 2');
    expect(lines).toContain('paddock_placement_seconds_bucket{le="0.1"} 0');
  });
});

describe("placement beside the record's write (idle system)", () => {
  it("places an idle create with one reservation and dispatches its start", async () => {
    await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 3 });
    const { session } = await create(h.nc, alice);
    const start = await inbox.next();
    expect(start).toMatchObject({ type: "start", sessionId: session.id, placementGeneration: 1, runnerGeneration: 1 });
    expect(await untilSession(h.nc, session.id, (s) => s.state === "creating")).toMatchObject({ runnerId: "r1", placementGeneration: 1 });
    expect(await capacityHistory("r1")).toEqual([0, 1]);
  });

  it("gives the slot back when the write beside it did not create the record", async () => {
    const { context: ctx } = await h.start();
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 3 });
    const afterWrite = ctx.placeOnWrite(queued(1));
    expect(afterWrite).toBeDefined();
    await waitForCapacityUsed(h.nc, "r1", 1);
    afterWrite?.(false);
    await waitForCapacityUsed(h.nc, "r1", 0);
    expect(await capacityHistory("r1")).toEqual([0, 1, 0]);
  });

  it("keeps passes off a session placed beside its write: each session is placed once, by one reservation each", async () => {
    const { context: ctx } = await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 3 });
    const ours = queued(1);
    const afterWrite = ctx.placeOnWrite(ours);
    expect(afterWrite).toBeDefined();
    const key = sessionKey(ours.workspaceId, ours.id);
    ctx.sessionView.apply(key, await ctx.sessions.create(key, ours));
    // Another queued session: the pass its write triggers places it and must leave ours alone.
    const other = queued(2);
    await ctx.sessions.create(sessionKey(other.workspaceId, other.id), other);
    await untilSession(h.nc, other.id, (s) => s.state === "creating");
    afterWrite?.(true);
    expect(await untilSession(h.nc, ours.id, (s) => s.state === "creating")).toMatchObject({ runnerId: "r1", placementGeneration: 1 });
    const starts = [await inbox.next(), await inbox.next()];
    expect(starts.map((c) => c.sessionId).sort()).toEqual([ours.id, other.id]);
    // The reservation beside the write (1), then the pass's for the other one (2): nothing given back.
    expect(await capacityHistory("r1")).toEqual([0, 1, 2]);
  });

  it("reserves nothing for a create on a full fleet: it waits queued for a pass", async () => {
    await h.start();
    const older = (await create(h.nc, alice)).session;
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 1 });
    const first = await inbox.next();
    expect(first.sessionId).toBe(older.id);
    const younger = (await create(h.nc, alice)).session;
    expect((await get(h.nc, alice, younger.id)).state).toBe("queued");
    expect(await capacityHistory("r1")).toEqual([0, 1]);
    // The older one ends; its slot goes to the queued one.
    await publishFact(h.nc, factFor("r1", first, { type: "running" }));
    await publishFact(h.nc, factFor("r1", first, { type: "exited", exitCode: 0 }));
    expect((await inbox.next()).sessionId).toBe(younger.id);
  });
});

describe("facts applied on the view's revision", () => {
  async function placedWithFrozenView() {
    const s = await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 2 });
    const { session, start } = await runningSession(h.nc, "r1", inbox);
    // From here on this replica's view only learns of its own writes, like a replica whose watch lags.
    s.context.sessionView.stop();
    const kv = await new Kvm(h.nc).open("sessions");
    const key = sessionKey(session.workspaceId, session.id);
    const overwrite = async (patch: Partial<Session>) => {
      const entry = await kv.get(key);
      await kv.update(key, JSON.stringify({ ...entry?.json<Session>(), ...patch }), entry?.revision ?? 0);
    };
    const fact = (body: Partial<RunnerFact>): RunnerFact =>
      ({ type: "exited", exitCode: 0, runnerId: "r1", poolId: "default", runnerGeneration: start.runnerGeneration, sessionId: session.id, workspaceId: session.workspaceId, placementGeneration: 1, at: 5, ...body }) as RunnerFact;
    return { ctx: s.context, session, overwrite, fact };
  }

  it("decides on an exact read when the view is behind: a fact of a newer placement is applied, not dropped", async () => {
    const { ctx, session, overwrite, fact } = await placedWithFrozenView();
    // Another replica re-placed it (generation 2) and this view has not seen it.
    await overwrite({ state: "creating", placementGeneration: 2 });
    expect(await applyRunnerFact(ctx, fact({ type: "running", placementGeneration: 2 }), Subjects.runnerEvents("default", "r1"))).toBe("applied");
    expect(await get(h.nc, alice, session.id)).toMatchObject({ state: "running", placementGeneration: 2 });
    const stale = await ctx.metrics.staleFacts.get();
    expect(stale.values.reduce((n, v) => n + v.value, 0)).toBe(0);
  });

  it("never writes over a newer revision: the CAS on the view's revision loses and the fact is judged again", async () => {
    const { ctx, session, overwrite, fact } = await placedWithFrozenView();
    // The view still says running at generation 1; the record has moved on to generation 2.
    await overwrite({ state: "creating", placementGeneration: 2 });
    expect(await applyRunnerFact(ctx, fact({ type: "exited", exitCode: 3 }), Subjects.runnerEvents("default", "r1"))).toBe("stale");
    expect(await get(h.nc, alice, session.id)).toMatchObject({ state: "creating", placementGeneration: 2 });
    // And a deleted record is not resurrected by an exit report.
    await overwrite({ state: "destroyed", placementGeneration: 1 });
    expect(await applyRunnerFact(ctx, fact({ type: "exited", exitCode: 3 }), Subjects.runnerEvents("default", "r1"))).toBe("duplicate");
    expect((await get(h.nc, alice, session.id)).state).toBe("destroyed");
  });
});
