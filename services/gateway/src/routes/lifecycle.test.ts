import { describe, expect, it } from "vitest";
import { api, expectError, makeSession, SVC_SESSION, TOKENS, useHarness, WS1, WS2 } from "../testing/testkit.ts";

const h = useHarness();

const body = (v: unknown) => JSON.stringify(v);

let n = 0;
/** A fresh running session of alice in WS1 (and one of eve in WS2 under the same id). */
function fresh(): string {
  const id = `lc${++n}`;
  h.scheduler.put(makeSession({ id, workspaceId: WS1, creatorId: "alice", spec: { apps: [{ name: "web", cmd: ["x"] }, { name: "db", cmd: ["y"] }] } }));
  return id;
}

/** Every lifecycle route: [name, path of session id, good body, rpc verb]. */
const ROUTES: Array<[string, (id: string) => string, string | undefined, string]> = [
  ["suspend", (id) => `/v1/sessions/${id}/suspend`, body({ warm: true }), "suspend"],
  ["resume", (id) => `/v1/sessions/${id}/resume`, undefined, "resume"],
  ["snapshot", (id) => `/v1/sessions/${id}/snapshot`, undefined, "snapshot"],
  ["recycle", (id) => `/v1/sessions/${id}/recycle`, undefined, "recycle"],
  ["restart", (id) => `/v1/sessions/${id}/apps/web/restart`, undefined, "restartApp"],
];

describe("lifecycle routes: what each answers", () => {
  it("suspend {warm} answers the session; the scope and warm flag reach the scheduler", async () => {
    const id = fresh();
    const warm = await api(h.url, "POST", `/v1/sessions/${id}/suspend`, { token: TOKENS.alice, body: body({ warm: true }) });
    expect(warm.status).toBe(200);
    expect(warm.json).toMatchObject({ id, state: "suspended_warm" });
    const cold = await api(h.url, "POST", `/v1/sessions/${fresh()}/suspend`, { token: TOKENS.admin, body: body({ warm: false }) });
    expect(cold.json).toMatchObject({ state: "suspended_cold" });
    expect(h.scheduler.callsOf("suspend").map((c) => c.request)).toEqual([
      { scope: { workspaceId: WS1, actor: { id: "alice", kind: "user" } }, sessionId: id, warm: true },
      expect.objectContaining({ warm: false }),
    ]);
  });

  it("resume takes an empty body or {}", async () => {
    const id = fresh();
    const a = await api(h.url, "POST", `/v1/sessions/${id}/resume`, { token: TOKENS.alice });
    expect(a.status).toBe(200);
    expect(a.json).toMatchObject({ id, state: "running" });
    expect((await api(h.url, "POST", `/v1/sessions/${id}/resume`, { token: TOKENS.alice, body: "{}" })).status).toBe(200);
    expect(h.scheduler.callsOf("resume")).toHaveLength(2);
  });

  it("snapshot answers the Checkpoint itself", async () => {
    const id = fresh();
    const r = await api(h.url, "POST", `/v1/sessions/${id}/snapshot`, { token: TOKENS.alice });
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ ref: `checkpoints/${WS1}/${id}-1`, format: "tar+gzip", capabilities: ["portable"] });
  });

  it("recycle answers 201 {released, session} with a new id", async () => {
    const id = fresh();
    const r = await api(h.url, "POST", `/v1/sessions/${id}/recycle`, { token: TOKENS.alice, body: "{}" });
    expect(r.status).toBe(201);
    expect(r.json.released).toMatchObject({ id, state: "destroyed" });
    expect(r.json.session.id).not.toBe(id);
    expect(Object.keys(r.json).sort()).toEqual(["released", "session"]);
  });

  it("a transition the state machine forbids is the scheduler's conflict (409) and changes nothing", async () => {
    const id = fresh();
    h.scheduler.put({ ...makeSession({ id, workspaceId: WS1, creatorId: "alice" }), state: "destroyed" });
    const r = await api(h.url, "POST", `/v1/sessions/${id}/suspend`, { token: TOKENS.alice, body: body({ warm: false }) });
    expectError(r, 409, "conflict");
    const after = await api(h.url, "GET", `/v1/sessions/${id}`, { token: TOKENS.alice });
    expect(after.json).toMatchObject({ id, state: "destroyed" });
  });

  it("restart answers the session; an app the session does not run is not_found", async () => {
    const id = fresh();
    const r = await api(h.url, "POST", `/v1/sessions/${id}/apps/web/restart`, { token: TOKENS.alice });
    expect(r.status).toBe(200);
    expect(r.json.apps.web).toMatchObject({ generation: 2, trigger: "manual" });
    expect(h.scheduler.callsOf("restartApp")[0]?.request).toMatchObject({ sessionId: id, app: "web" });
    expectError(await api(h.url, "POST", `/v1/sessions/${id}/apps/nope/restart`, { token: TOKENS.alice }), 404, "not_found");
    expect(h.scheduler.callsOf("restartApp")).toHaveLength(1);
  });
});

describe("lifecycle routes: authorization", () => {
  for (const [name, path, b, verb] of ROUTES) {
    it(`${name}: the creator and an admin may; another member is forbidden; an outsider and another session's token see nothing (not_found)`, async () => {
      const id = fresh();
      expectError(await api(h.url, "POST", path(id), { token: TOKENS.bob, ...(b ? { body: b } : {}) }), 403, "forbidden");
      expectError(await api(h.url, "POST", path(id), { token: TOKENS.outsider, ...(b ? { body: b } : {}) }), 404, "not_found");
      expectError(await api(h.url, "POST", path(id), { token: TOKENS.svc, ...(b ? { body: b } : {}) }), 404, "not_found");
      expect(h.scheduler.callsOf(verb)).toEqual([]);
      expect((await api(h.url, "POST", path(id), { token: TOKENS.alice, ...(b ? { body: b } : {}) })).status).toBeLessThan(300);
      expect((await api(h.url, "POST", path(fresh()), { token: TOKENS.admin, ...(b ? { body: b } : {}) })).status).toBeLessThan(300);
      expect(h.scheduler.callsOf(verb)).toHaveLength(2);
    });

    it(`${name}: another workspace's session is not_found, even for its admin`, async () => {
      h.scheduler.put(makeSession({ id: "other1", workspaceId: WS2, creatorId: "eve" }));
      expectError(await api(h.url, "POST", path("other1"), { token: TOKENS.admin, ...(b ? { body: b } : {}) }), 404, "not_found");
      expectError(await api(h.url, "POST", path("missing"), { token: TOKENS.admin, ...(b ? { body: b } : {}) }), 404, "not_found");
      expect(h.scheduler.callsOf(verb)).toEqual([]);
    });
  }
});

describe("lifecycle routes: bad input calls nothing", () => {
  const badTokens: Array<Record<string, string>> = [
    {},
    { authorization: "Bearer tok_not_a_real_token" },
    { authorization: `Bearer ${TOKENS.expired}` },
    { authorization: `Basic ${TOKENS.alice}` },
  ];
  for (const [name, path, b] of ROUTES) {
    it(`${name}: missing, wrong, expired and malformed tokens are unauthenticated`, async () => {
      for (const headers of badTokens) expectError(await api(h.url, "POST", path("lc1"), { headers, ...(b ? { body: b } : {}) }), 401, "unauthenticated");
      expect(h.scheduler.calls).toEqual([]);
    });

    it(`${name}: invalid JSON, unknown fields, wrong types, arrays, unknown query, bad ids are invalid`, async () => {
      const id = fresh();
      const bodies = ["{not json", body({ surprise: 1 }), "[]", "null", body({ warm: "yes" }), body({ warm: true, extra: 1 })];
      for (const bad of bodies) expectError(await api(h.url, "POST", path(id), { token: TOKENS.alice, body: bad }), 400, "invalid");
      expectError(await api(h.url, "POST", `${path(id)}?x=1`, { token: TOKENS.alice, ...(b ? { body: b } : {}) }), 400, "invalid");
      for (const badId of ["bad%2Eid", "x".repeat(65), "a%20b"]) {
        expectError(await api(h.url, "POST", path(badId), { token: TOKENS.alice, ...(b ? { body: b } : {}) }), 400, "invalid");
      }
      expect(h.scheduler.calls).toEqual([]);
    });

    it(`${name}: an oversize body is too_large`, async () => {
      const big = body({ warm: true, pad: "x".repeat(5000) });
      expectError(await api(h.url, "POST", path("lc1"), { token: TOKENS.alice, body: big }), 413, "too_large");
      expect(h.scheduler.calls).toEqual([]);
    });
  }

  it("suspend requires the body {warm: boolean}", async () => {
    const id = fresh();
    for (const bad of [undefined, "", "{}", body({ warm: null }), body({ warm: 1 })]) {
      expectError(await api(h.url, "POST", `/v1/sessions/${id}/suspend`, { token: TOKENS.alice, ...(bad !== undefined ? { body: bad } : {}) }), 400, "invalid");
    }
    expect(h.scheduler.calls).toEqual([]);
  });

  it("restart validates the app name before calling anything", async () => {
    expectError(await api(h.url, "POST", `/v1/sessions/${fresh()}/apps/a.b/restart`, { token: TOKENS.alice }), 400, "invalid");
    expect(h.scheduler.calls).toEqual([]);
  });

  it("a wrong method is 405 invalid", async () => {
    const r = await api(h.url, "GET", `/v1/sessions/${fresh()}/suspend`, { token: TOKENS.alice });
    expectError(r, 405, "invalid");
    expect(r.headers.get("allow")).toBe("POST");
  });
});

describe("a session's own service token", () => {
  it("creates sessions (its scope carries its session, the scheduler makes them children)", async () => {
    const r = await api(h.url, "POST", "/v1/sessions", { token: TOKENS.svc, body: body({ spec: { cmd: ["sh"] } }) });
    expect(r.status).toBe(201);
    expect(r.json).toMatchObject({ parentId: SVC_SESSION, creatorId: `svc-${SVC_SESSION}` });
    expect(h.scheduler.callsOf("create")[0]?.request).toMatchObject({
      scope: { workspaceId: WS1, actor: { id: `svc-${SVC_SESSION}`, kind: "service" }, sessionId: SVC_SESSION },
    });
  });

  it("reads its own session, and nothing else of others (its roster: roster.test.ts)", async () => {
    h.scheduler.put(makeSession({ id: SVC_SESSION, workspaceId: WS1, creatorId: "alice" }));
    const other = fresh();
    expect((await api(h.url, "GET", `/v1/sessions/${SVC_SESSION}`, { token: TOKENS.svc })).json).toMatchObject({ id: SVC_SESSION });
    expectError(await api(h.url, "GET", `/v1/sessions/${other}`, { token: TOKENS.svc }), 404, "not_found");
    const listed = await api(h.url, "GET", "/v1/sessions", { token: TOKENS.svc });
    expect(listed.status).toBe(200);
    expect((listed.json.sessions as Array<{ id: string }>).map((s) => s.id)).not.toContain(other);
    expectError(await api(h.url, "DELETE", `/v1/sessions/${SVC_SESSION}`, { token: TOKENS.svc }), 403, "forbidden");
    expectError(await api(h.url, "GET", `/v1/sessions/${SVC_SESSION}/log`, { token: TOKENS.svc }), 403, "forbidden");
    expect(h.scheduler.callsOf("delete")).toEqual([]);
  });

  it("a user token never carries a sessionId", async () => {
    await api(h.url, "POST", "/v1/sessions", { token: TOKENS.alice, body: body({ spec: {} }) });
    expect((h.scheduler.callsOf("create")[0]?.request as { scope: object }).scope).not.toHaveProperty("sessionId");
  });
});
