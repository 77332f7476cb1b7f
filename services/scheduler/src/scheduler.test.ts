import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Api } from "@paddock/contracts";
import { callRpc } from "@paddock/bus";
import {
  alice,
  create as createIn,
  dispatchInbox as inboxIn,
  factFor,
  get as getIn,
  mallory,
  publishFact as publishIn,
  register as registerIn,
  startHarness,
  waitForState as waitIn,
  type SchedulerHarness,
} from "./testing/testkit.ts";

let h: SchedulerHarness;
let nc: SchedulerHarness["nc"];
beforeAll(async () => {
  h = await startHarness();
  nc = h.nc;
});
afterEach(async () => h.reset());
afterAll(async () => h.close());

const startScheduler = () => h.start();
const create = (scope: typeof alice, body: Record<string, unknown> = {}) => createIn(nc, scope, body);
const get = (scope: typeof alice, id: string) => getIn(nc, scope, id);
const register = (req: Parameters<typeof registerIn>[1]) => registerIn(nc, req);
const dispatchInbox = (runnerId: string) => inboxIn(nc, runnerId);
const waitForState = (id: string, state: string) => waitIn(nc, id, state);
const publishFact = (fact: Parameters<typeof publishIn>[1]) => publishIn(nc, fact);

describe("create", () => {
  it("stores a queued record owned by the caller's workspace", async () => {
    await startScheduler();
    const { session, replayed } = await create(alice, { name: "first" });
    expect(replayed).toBe(false);
    expect(session).toMatchObject({ state: "queued", workspaceId: "ws1", creatorId: "alice", placementGeneration: 0 });
    expect(await get(alice, session.id)).toMatchObject({ id: session.id });
    // Another workspace cannot see it: not_found, not forbidden.
    await expect(get(mallory, session.id)).rejects.toMatchObject({ code: "not_found" });
  });

  it("yields exactly one session for concurrent duplicates on two replicas and after a restart", async () => {
    await startScheduler();
    await startScheduler();
    const results = await Promise.all(Array.from({ length: 6 }, () => create(alice, { idempotencyKey: "k1" })));
    const ids = new Set(results.map((r) => r.session.id));
    expect(ids.size).toBe(1);
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);
    for (const s of h.schedulers.splice(0)) await s.stop();
    await startScheduler();
    const replay = await create(alice, { idempotencyKey: "k1" });
    expect(replay.replayed).toBe(true);
    expect(replay.session.id).toBe([...ids][0]);
    await expect(create(alice, { idempotencyKey: "k1", name: "other" })).rejects.toMatchObject({ code: "conflict" });
    const page = await callRpc(nc, Api.listSessions, { scope: alice, limit: 50, includeTerminal: true });
    expect(page.sessions).toHaveLength(1);
  });

  it("keeps names unique among the creator's live sessions", async () => {
    await startScheduler();
    const first = await create(alice, { name: "dup" });
    await expect(create(alice, { name: "dup" })).rejects.toMatchObject({ code: "conflict" });
    // Another creator may use the same name.
    await create({ workspaceId: "ws1", actor: { id: "bob", kind: "user" } }, { name: "dup" });
    await callRpc(nc, Api.deleteSession, { scope: alice, sessionId: first.session.id });
    const again = await create(alice, { name: "dup" });
    expect(again.session.id).not.toBe(first.session.id);
  });

  it("rejects a parent that does not exist and a malformed request", async () => {
    await startScheduler();
    await expect(create(alice, { parentId: "nope" })).rejects.toMatchObject({ code: "invalid" });
    const reply = await nc.request(Api.createSession.subject, new TextEncoder().encode('{"scope":{},"body":{"spec":{"bogus":1}}}'));
    expect(reply.json()).toMatchObject({ ok: false, error: { code: "invalid" } });
    const page = await callRpc(nc, Api.listSessions, { scope: alice, limit: 50, includeTerminal: true });
    expect(page.sessions).toHaveLength(0);
  });
});

describe("placement and facts", () => {
  it("places on a registered runner, applies fenced facts, and frees the slot on exit", async () => {
    await startScheduler();
    const inbox = await dispatchInbox("r1");
    const reg = await register({ runnerId: "r1", generation: 1, capacityTotal: 1 });
    expect(reg).toMatchObject({ accepted: true, generation: 1 });
    const a = (await create(alice)).session;
    const b = (await create(alice)).session;
    const startA = await inbox.next();
    expect(startA).toMatchObject({ type: "start", sessionId: a.id, placementGeneration: 1, runnerGeneration: 1 });
    const placedA = await get(alice, a.id);
    expect(placedA).toMatchObject({ state: "creating", runnerId: "r1", placementGeneration: 1 });
    expect((await get(alice, b.id)).state).toBe("queued");

    // A stale fact (wrong placement generation) is dropped, not applied.
    await publishFact(factFor("r1", startA, { type: "running" }, { placementGeneration: 7 }));
    await publishFact(factFor("r1", startA, { type: "running" }));
    await waitForState(a.id, "running");
    // A dead report from a superseded runner generation never changes the record.
    await publishFact(factFor("r1", startA, { type: "exited", exitCode: 9 }, { runnerGeneration: 0 }));
    await publishFact(factFor("r1", startA, { type: "exited", exitCode: 3 }));
    const dead = await waitForState(a.id, "dead");
    expect(dead.childExitCode).toBe(3);
    const stale = await h.schedulers[0]!.context.metrics.staleFacts.get();
    expect(stale.values.reduce((n, v) => n + v.value, 0)).toBe(2);

    // The freed slot goes to the queued session.
    const startB = await inbox.next();
    expect(startB).toMatchObject({ type: "start", sessionId: b.id, placementGeneration: 1 });
  });

  it("never exceeds a runner's capacity with two replicas placing at once", async () => {
    await startScheduler();
    await startScheduler();
    await register({ runnerId: "r2", generation: 1, capacityTotal: 3 });
    const created = await Promise.all(Array.from({ length: 10 }, () => create(alice)));
    const inbox = await dispatchInbox("r2");
    const starts = [await inbox.next(), await inbox.next(), await inbox.next()];
    expect(new Set(starts.map((s) => s.sessionId)).size).toBe(3);
    const states = await Promise.all(created.map((c) => get(alice, c.session.id)));
    expect(states.filter((s) => s.state === "creating")).toHaveLength(3);
    const runners = await callRpc(nc, Api.listRunners, { scope: alice, limit: 10 });
    expect(runners.runners[0]).toMatchObject({ id: "r2", capacityUsed: 3, capacityTotal: 3 });
  });

  it("refuses a stale registration claim and returns the authoritative generation", async () => {
    await startScheduler();
    expect(await register({ runnerId: "r3", generation: 5 })).toMatchObject({ accepted: true, generation: 5 });
    expect(await register({ runnerId: "r3", generation: 5 })).toMatchObject({ accepted: false, generation: 5 });
    expect(await register({ runnerId: "r3", generation: 2 })).toMatchObject({ accepted: false, generation: 5 });
    expect(await register({ runnerId: "r3", generation: 6 })).toMatchObject({ accepted: true, generation: 6 });
  });

  it("destroys what a re-registered runner holds that no record places there", async () => {
    await startScheduler();
    const reply = await register({
      runnerId: "r4",
      generation: 1,
      sessions: [{ sessionId: "ghost", workspaceId: "ws1", placementGeneration: 1 }],
    });
    expect(reply.destroy).toEqual([{ sessionId: "ghost", workspaceId: "ws1", placementGeneration: 1 }]);
  });
});

describe("list and delete", () => {
  it("pages in stable (createdAt, id) order, each session exactly once", async () => {
    await startScheduler();
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) ids.push((await create(alice)).session.id);
    await create(mallory);
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await callRpc(nc, Api.listSessions, { scope: alice, limit: 3, includeTerminal: false, ...(cursor ? { cursor } : {}) });
      expect(page.sessions.length).toBeLessThanOrEqual(3);
      seen.push(...page.sessions.map((s) => s.id));
      cursor = page.nextCursor;
    } while (cursor);
    expect(seen).toEqual(ids);
    await expect(callRpc(nc, Api.listSessions, { scope: alice, limit: 3, includeTerminal: false, cursor: "garbage" })).rejects.toMatchObject({
      code: "invalid",
    });
  });

  it("walking all pages while sessions are created and deleted returns every session that existed throughout exactly once", async () => {
    await startScheduler();
    await startScheduler();
    const stable: string[] = [];
    const doomed: string[] = [];
    for (let i = 0; i < 30; i++) stable.push((await create(alice)).session.id);
    for (let i = 0; i < 10; i++) doomed.push((await create(alice)).session.id);
    const seen: string[] = [];
    let cursor: string | undefined;
    let churn = 0;
    do {
      const page = await callRpc(nc, Api.listSessions, { scope: alice, limit: 4, includeTerminal: false, ...(cursor ? { cursor } : {}) });
      seen.push(...page.sessions.map((s) => s.id));
      cursor = page.nextCursor;
      // Between pages: new sessions arrive and old ones go.
      await create(alice);
      const victim = doomed[churn++];
      if (victim) await callRpc(nc, Api.deleteSession, { scope: alice, sessionId: victim });
    } while (cursor);
    expect(new Set(seen).size).toBe(seen.length);
    for (const id of stable) expect(seen).toContain(id);
  });

  it("cancels a queued session, destroys a running one, and is idempotent", async () => {
    await startScheduler();
    const queued = (await create(alice)).session;
    const canceled = await callRpc(nc, Api.deleteSession, { scope: alice, sessionId: queued.id });
    expect(canceled.session.state).toBe("canceled");
    expect((await callRpc(nc, Api.deleteSession, { scope: alice, sessionId: queued.id })).session.state).toBe("canceled");
    const list = await callRpc(nc, Api.listSessions, { scope: alice, limit: 10, includeTerminal: false });
    expect(list.sessions.map((s) => s.id)).not.toContain(queued.id);

    const inbox = await dispatchInbox("r5");
    await register({ runnerId: "r5", generation: 1 });
    const s = (await create(alice)).session;
    const start = await inbox.next();
    await publishFact(factFor("r5", start, { type: "running" }));
    await waitForState(s.id, "running");
    const destroyed = await callRpc(nc, Api.deleteSession, { scope: alice, sessionId: s.id });
    expect(destroyed.session.state).toBe("destroyed");
    expect(await inbox.next()).toMatchObject({ type: "destroy", sessionId: s.id, placementGeneration: 1 });
    await expect(callRpc(nc, Api.deleteSession, { scope: mallory, sessionId: s.id })).rejects.toMatchObject({ code: "not_found" });
  });

  it("advances the controller generation atomically across replicas", async () => {
    await startScheduler();
    await startScheduler();
    const s = (await create(alice)).session;
    const grants = await Promise.all(
      Array.from({ length: 8 }, () => callRpc(nc, Api.attachSession, { scope: alice, sessionId: s.id, mode: "controller" })),
    );
    expect(grants.map((g) => g.session.controllerGeneration).sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    const viewer = await callRpc(nc, Api.attachSession, { scope: alice, sessionId: s.id, mode: "viewer" });
    expect(viewer.session.controllerGeneration).toBe(8);
  });
});
