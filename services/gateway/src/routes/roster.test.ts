/**
 * The owner roster through the gateway (issue 26, item 6): a session's own
 * token lists, gets, deletes and recycles the sessions it created and sees
 * nothing else; members filter the list by creator and parent; a bad filter
 * is a typed 400. (The scheduler's own restriction: scheduler api/roster.test.ts.)
 */
import { describe, expect, it } from "vitest";
import { api, expectError, makeSession, SVC_SESSION, TOKENS, useHarness, WS1 } from "../testing/testkit.ts";

const h = useHarness();
const SVC_ACTOR = `svc-${SVC_SESSION}`;

/** A child of the svc token's session, created with that token (the scheduler gives it the token's actor as creator). */
async function child(): Promise<string> {
  const r = await api(h.url, "POST", "/v1/sessions", { token: TOKENS.svc, body: JSON.stringify({ spec: { cmd: ["sh"] } }) });
  expect(r.status).toBe(201);
  expect(r.json).toMatchObject({ creatorId: SVC_ACTOR, parentId: SVC_SESSION });
  return r.json.id as string;
}

let n = 0;
/** A session of alice's in WS1: a sibling of the svc token's session. */
function sibling(): string {
  const id = `sib${String(++n)}`;
  h.scheduler.put(makeSession({ id, workspaceId: WS1, creatorId: "alice", parentId: SVC_SESSION }));
  return id;
}

describe("a session's token and the sessions it created", () => {
  it("gets, deletes and recycles them", async () => {
    const a = await child();
    expect((await api(h.url, "GET", `/v1/sessions/${a}`, { token: TOKENS.svc })).json).toMatchObject({ id: a });
    const del = await api(h.url, "DELETE", `/v1/sessions/${a}`, { token: TOKENS.svc });
    expect(del.status).toBe(200);
    expect(["canceled", "destroyed"]).toContain(del.json.state);
    const b = await child();
    const rec = await api(h.url, "POST", `/v1/sessions/${b}/recycle`, { token: TOKENS.svc });
    expect(rec.status).toBe(201);
    expect(rec.json.released).toMatchObject({ id: b });
    expect(h.scheduler.callsOf("recycle")[0]?.request).toMatchObject({ scope: { sessionId: SVC_SESSION }, sessionId: b });
  });

  it("may not suspend, exec in or read the log of them: forbidden", async () => {
    const a = await child();
    expectError(await api(h.url, "POST", `/v1/sessions/${a}/suspend`, { token: TOKENS.svc, body: JSON.stringify({ warm: true }) }), 403, "forbidden");
    expectError(await api(h.url, "GET", `/v1/sessions/${a}/log`, { token: TOKENS.svc }), 403, "forbidden");
    expect(h.scheduler.callsOf("suspend")).toEqual([]);
  });

  it("another session (even one whose parent is its session) is the not_found of one that does not exist", async () => {
    const s = sibling();
    for (const [method, path] of [
      ["GET", (id: string) => `/v1/sessions/${id}`],
      ["DELETE", (id: string) => `/v1/sessions/${id}`],
      ["POST", (id: string) => `/v1/sessions/${id}/recycle`],
    ] as const) {
      const real = await api(h.url, method, path(s), { token: TOKENS.svc });
      const none = await api(h.url, method, path("nosuch1"), { token: TOKENS.svc });
      expectError(real, 404, "not_found");
      expect(real.json).toEqual(none.json);
    }
    expect(h.scheduler.callsOf("delete")).toEqual([]);
    expect(h.scheduler.callsOf("recycle")).toEqual([]);
  });

  it("lists only the sessions it created (never its own, never a sibling), whatever the scheduler answers", async () => {
    h.scheduler.put(makeSession({ id: SVC_SESSION, workspaceId: WS1, creatorId: "alice" }));
    const mine = await child();
    const s = sibling();
    const r = await api(h.url, "GET", "/v1/sessions?includeTerminal=true&limit=500", { token: TOKENS.svc });
    expect(r.status).toBe(200);
    const ids = (r.json.sessions as Array<{ id: string; creatorId: string }>).map((x) => x.id);
    expect(ids).toContain(mine);
    expect(ids).not.toContain(s);
    expect(ids).not.toContain(SVC_SESSION);
    expect((r.json.sessions as Array<{ creatorId: string }>).every((x) => x.creatorId === SVC_ACTOR)).toBe(true);
    expect(h.scheduler.callsOf("list")[0]?.request).toMatchObject({ scope: { sessionId: SVC_SESSION } });
  });
});

describe("GET /v1/sessions?creatorId=&parentId=", () => {
  it("passes both filters to the scheduler", async () => {
    expect((await api(h.url, "GET", `/v1/sessions?creatorId=alice&parentId=${SVC_SESSION}`, { token: TOKENS.bob })).status).toBe(200);
    expect(h.scheduler.callsOf("list")[0]?.request).toMatchObject({ creatorId: "alice", parentId: SVC_SESSION });
  });

  it("a malformed creatorId is a typed 400 invalid, never asked of the scheduler", async () => {
    for (const bad of ["../x", "a.b", "", "x".repeat(65), "%00"]) {
      expectError(await api(h.url, "GET", `/v1/sessions?creatorId=${bad}`, { token: TOKENS.alice }), 400, "invalid");
    }
    expectError(await api(h.url, "GET", "/v1/sessions?creatorId=a&creatorId=b", { token: TOKENS.alice }), 400, "invalid");
    expect(h.scheduler.callsOf("list")).toEqual([]);
  });
});
