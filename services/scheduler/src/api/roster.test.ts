/**
 * The owner roster in the scheduler (issue 26, item 6): a session's token
 * knows only its session and the sessions it created (every API path, not
 * just the gateway's); lists filter by creator and parent; recycle links the
 * released record and its replacement in one `recycle` fact, and a recycle
 * asked again (a retry, after a crash between its two writes, or a
 * concurrent one) answers the same pair.
 */
import { describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { Api, sessionKey, type Scope, type Session } from "@paddock/contracts";
import { callRpc } from "@paddock/bus";
import { alice, create, dispatchInbox, get, register, revisionsOf, runningSession, useHarness, type SchedulerHarness } from "../testing/testkit.ts";

let h: SchedulerHarness;
useHarness((started) => (h = started));

const bob: Scope = { workspaceId: "ws1", actor: { id: "bob", kind: "user" } };
const asSession = (id: string): Scope => ({ workspaceId: "ws1", actor: { id, kind: "service" }, sessionId: id });
const list = (scope: Scope, q: { parentId?: string; creatorId?: string; includeTerminal?: boolean } = {}) =>
  callRpc(h.nc, Api.listSessions, { scope, limit: 100, includeTerminal: q.includeTerminal ?? true, ...q }).then((p) => p.sessions.map((s) => s.id).sort());

/** A running parent of alice's, two children its token created, one child alice created under it, and a session of bob's. */
async function family() {
  await h.start();
  const inbox = await dispatchInbox(h.nc, "r1");
  await register(h.nc, { runnerId: "r1", generation: 1 });
  const { session: parent } = await runningSession(h.nc, "r1", inbox);
  const token = asSession(parent.id);
  const a = (await create(h.nc, token)).session;
  const b = (await create(h.nc, token)).session;
  const byAlice = (await create(h.nc, alice, { parentId: parent.id })).session;
  const bobs = (await create(h.nc, bob)).session;
  return { parent, token, a, b, byAlice, bobs };
}

describe("lists filtered by creator and parent", () => {
  it("?creatorId and ?parentId filter, alone and together", async () => {
    const { parent, a, b, byAlice, bobs } = await family();
    expect(await list(alice, { parentId: parent.id })).toEqual([a.id, b.id, byAlice.id].sort());
    expect(await list(alice, { creatorId: parent.id })).toEqual([a.id, b.id].sort());
    expect(await list(alice, { creatorId: "bob" })).toEqual([bobs.id]);
    expect(await list(alice, { creatorId: "alice", parentId: parent.id })).toEqual([byAlice.id]);
    expect(await list(alice, { creatorId: "nobody" })).toEqual([]);
  });

  it("a bad filter is refused as invalid at the boundary", async () => {
    await h.start();
    await expect(callRpc(h.nc, Api.listSessions, { scope: alice, limit: 1, includeTerminal: false, creatorId: "../x" })).rejects.toMatchObject({ code: "invalid" });
  });
});

describe("a session's token knows only its session and what it created", () => {
  it("lists only the sessions it created: never its own, a sibling, or a child another made", async () => {
    const { token, a, b } = await family();
    expect(await list(token)).toEqual([a.id, b.id].sort());
    // A filter narrows its roster, never widens it.
    expect(await list(token, { creatorId: "alice" })).toEqual([]);
    expect(await list(token, { creatorId: "bob" })).toEqual([]);
  });

  it("gets, deletes and recycles them; anything else is not_found on every path", async () => {
    const { parent, token, a, b, byAlice, bobs } = await family();
    expect((await get(h.nc, token, a.id)).id).toBe(a.id);
    expect((await get(h.nc, token, parent.id)).id).toBe(parent.id);
    for (const other of [byAlice.id, bobs.id, "ses_nosuch"]) {
      await expect(get(h.nc, token, other)).rejects.toMatchObject({ code: "not_found" });
      await expect(callRpc(h.nc, Api.deleteSession, { scope: token, sessionId: other })).rejects.toMatchObject({ code: "not_found" });
      await expect(callRpc(h.nc, Api.recycleSession, { scope: token, sessionId: other })).rejects.toMatchObject({ code: "not_found" });
      await expect(callRpc(h.nc, Api.suspendSession, { scope: token, sessionId: other, warm: true })).rejects.toMatchObject({ code: "not_found" });
      await expect(callRpc(h.nc, Api.attachSession, { scope: token, sessionId: other, mode: "viewer" })).rejects.toMatchObject({ code: "not_found" });
    }
    expect((await get(h.nc, alice, bobs.id)).state).toBe("queued");
    expect((await callRpc(h.nc, Api.deleteSession, { scope: token, sessionId: a.id })).session.state).toBe("canceled");
    const { released, session: fresh } = await callRpc(h.nc, Api.recycleSession, { scope: token, sessionId: b.id });
    expect(released).toMatchObject({ id: b.id, successorId: fresh.id });
    // The replacement stays in the roster: its creator and parent are the token's session.
    expect(fresh).toMatchObject({ predecessorId: b.id, creatorId: parent.id, parentId: parent.id });
    expect(await list(token, { includeTerminal: false })).toEqual([fresh.id]);
  });
});

describe("recycle lineage", () => {
  it("links the released record and its replacement, committing exactly one recycle fact", async () => {
    await h.start();
    const { session } = await create(h.nc, alice, { name: "worker", spec: { cmd: ["echo", "x"] } });
    const { released, session: fresh } = await callRpc(h.nc, Api.recycleSession, { scope: alice, sessionId: session.id });
    expect(released).toMatchObject({ id: session.id, state: "canceled", successorId: fresh.id, lastFact: { action: "recycle", actorId: "alice" } });
    expect(fresh).toMatchObject({ predecessorId: session.id, name: "worker", state: "queued", lastFact: { action: "create" } });
    expect(fresh.successorId).toBeUndefined();
    const facts = [...(await revisionsOf(h.nc, session.id)), ...(await revisionsOf(h.nc, fresh.id))].map((r) => r.lastFact.action);
    expect(facts.filter((a) => a === "recycle")).toHaveLength(1);
    expect(facts).not.toContain("cancel");

    // Asked again: the same pair, no second replacement, no second fact.
    const again = await callRpc(h.nc, Api.recycleSession, { scope: alice, sessionId: session.id });
    expect(again.session.id).toBe(fresh.id);
    expect(again.released.successorId).toBe(fresh.id);
    expect(await list(alice, { includeTerminal: true })).toEqual([session.id, fresh.id].sort());
    expect((await revisionsOf(h.nc, session.id)).filter((r) => r.lastFact.action === "recycle")).toHaveLength(1);
  });

  it("keeps the released session's creator: an admin's recycle leaves the replacement in its creator's roster", async () => {
    await h.start();
    const admin: Scope = { workspaceId: "ws1", actor: { id: "boss", kind: "user" } };
    const { session } = await create(h.nc, alice);
    const { released, session: fresh } = await callRpc(h.nc, Api.recycleSession, { scope: admin, sessionId: session.id });
    expect(released.lastFact).toMatchObject({ action: "recycle", actorId: "boss" });
    expect(fresh).toMatchObject({ creatorId: "alice", lastFact: { actorId: "boss" } });
  });

  it("a recycle cut short after the release is finished by the next one, under the id the release named", async () => {
    await h.start();
    const { session } = await create(h.nc, alice, { name: "cut" });
    // What a scheduler that died right after the release's write left behind.
    const kv = await new Kvm(h.nc).open("sessions");
    const key = sessionKey("ws1", session.id);
    const entry = await kv.get(key);
    const current = entry?.json<Session>() as Session;
    const at = current.updatedAt + 1;
    const cut: Session = { ...current, state: "canceled", successorId: "ses_successor", updatedAt: at, lastFact: { eventId: "evt_cut", action: "recycle", actorId: "alice", at } };
    await kv.update(key, JSON.stringify(cut), entry?.revision ?? 0);

    const { released, session: fresh } = await callRpc(h.nc, Api.recycleSession, { scope: alice, sessionId: session.id });
    expect(released.lastFact.eventId).toBe("evt_cut");
    expect(fresh).toMatchObject({ id: "ses_successor", predecessorId: session.id, name: "cut", creatorId: "alice", lastFact: { action: "create" } });
    const twice = await callRpc(h.nc, Api.recycleSession, { scope: alice, sessionId: session.id });
    expect(twice.session).toEqual(fresh);
    expect(await list(alice, { includeTerminal: true })).toEqual([session.id, "ses_successor"].sort());
  });

  it("concurrent recycles of one session answer one pair", async () => {
    await h.start();
    const { session } = await create(h.nc, alice, { name: "race" });
    const answers = await Promise.all([0, 1, 2].map(() => callRpc(h.nc, Api.recycleSession, { scope: alice, sessionId: session.id })));
    const ids = new Set(answers.map((a) => a.session.id));
    expect(ids.size).toBe(1);
    expect(await list(alice, { includeTerminal: true })).toEqual([session.id, ...ids].sort());
    expect((await revisionsOf(h.nc, session.id)).filter((r) => r.lastFact.action === "recycle")).toHaveLength(1);
  });

  it("an ended session is recycled too: the link is a recycle fact on its record", async () => {
    await h.start();
    const { session } = await create(h.nc, alice);
    await callRpc(h.nc, Api.deleteSession, { scope: alice, sessionId: session.id });
    const { released, session: fresh } = await callRpc(h.nc, Api.recycleSession, { scope: alice, sessionId: session.id });
    expect(released).toMatchObject({ state: "canceled", successorId: fresh.id, lastFact: { action: "recycle" } });
    expect(fresh.predecessorId).toBe(session.id);
    expect((await revisionsOf(h.nc, session.id)).map((r) => r.lastFact.action)).toEqual(["create", "cancel", "recycle"]);
  });

  it("a replacement that cannot be made is refused before anything is released", async () => {
    const { parent } = await family();
    const child = (await create(h.nc, alice, { parentId: parent.id })).session;
    await callRpc(h.nc, Api.deleteSession, { scope: alice, sessionId: parent.id });
    // The parent ended (its children were ended with it); an ended child's replacement would be a child of an ended session.
    await expect(callRpc(h.nc, Api.recycleSession, { scope: alice, sessionId: child.id })).rejects.toMatchObject({ code: "conflict" });
    expect((await get(h.nc, alice, child.id)).successorId).toBeUndefined();
  });
});
