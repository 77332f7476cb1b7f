import { request as httpRequest } from "node:http";
import { describe, expect, it } from "vitest";
import { FLEET_WORKSPACE, MAX_PAGE_LIMIT } from "@paddock/contracts";
import { seedMember } from "../auth/auth.ts";
import { api, expectError, makeRunner, RUNNER, SVC_SESSION, TOKENS, useHarness, WS1, WS2 } from "../testing/testkit.ts";

const h = useHarness();

const body = (v: unknown) => JSON.stringify(v);

let n = 0;
/** A fresh active runner (runners are fleet-wide: no workspace). */
function fresh(): string {
  const id = `rn${++n}`;
  h.scheduler.putRunner(makeRunner({ id, poolId: "gpu", capabilities: ["gpu"], resources: { cpuMillis: 2000, memoryBytes: 1 << 30, diskBytes: 1 << 30 } }));
  return id;
}

/** Every state-change route: [verb, the state it asks for]. */
const ROUTES = [
  ["drain", "draining"],
  ["cordon", "cordoned"],
  ["uncordon", "active"],
] as const;

const stateCalls = () => h.scheduler.callsOf("setRunnerState");

describe("POST /v1/runners/:id/{drain,cordon,uncordon}", () => {
  for (const [verb, state] of ROUTES) {
    it(`${verb} answers 200 with the Runner; the scope and state "${state}" reach the scheduler`, async () => {
      const id = fresh();
      const r = await api(h.url, "POST", `/v1/runners/${id}/${verb}`, { token: TOKENS.admin });
      expect(r.status).toBe(200);
      expect(r.json).toEqual({ ...h.scheduler.runners.get(id), state });
      expect(r.json).toMatchObject({ id, poolId: "gpu", state, resources: { cpuMillis: 2000 } });
      expect(stateCalls().map((c) => c.request)).toEqual([{ scope: { workspaceId: WS1, actor: { id: "boss", kind: "user" } }, runnerId: id, state }]);
    });

    it(`${verb} takes an empty body or {}`, async () => {
      const id = fresh();
      expect((await api(h.url, "POST", `/v1/runners/${id}/${verb}`, { token: TOKENS.admin, body: "" })).status).toBe(200);
      expect((await api(h.url, "POST", `/v1/runners/${id}/${verb}`, { token: TOKENS.admin, body: "{}" })).status).toBe(200);
      expect(stateCalls()).toHaveLength(2);
    });
  }

  it("drain, cordon and uncordon move one runner between states", async () => {
    const id = fresh();
    const post = async (verb: string) => (await api(h.url, "POST", `/v1/runners/${id}/${verb}`, { token: TOKENS.admin })).json.state as string;
    expect([await post("cordon"), await post("drain"), await post("uncordon")]).toEqual(["cordoned", "draining", "active"]);
    expect(h.scheduler.runners.get(id)?.state).toBe("active");
  });

  it("an unknown runner is the scheduler's not_found (for an admin)", async () => {
    expectError(await api(h.url, "POST", "/v1/runners/missing/drain", { token: TOKENS.admin }), 404, "not_found");
    expect(stateCalls()).toHaveLength(1);
  });
});

describe("runner state changes: authorization", () => {
  for (const [verb] of ROUTES) {
    it(`${verb}: members, outsiders and a session's service token are forbidden and call nothing`, async () => {
      const id = fresh();
      for (const token of [TOKENS.alice, TOKENS.bob, TOKENS.outsider, TOKENS.svc]) {
        expectError(await api(h.url, "POST", `/v1/runners/${id}/${verb}`, { token }), 403, "forbidden");
      }
      // A member learns nothing about which runner ids exist.
      expectError(await api(h.url, "POST", `/v1/runners/missing/${verb}`, { token: TOKENS.alice }), 403, "forbidden");
      expect(h.scheduler.calls).toEqual([]);
      expect(h.scheduler.runners.get(id)?.state).toBe("active");
    });

    it(`${verb}: a fleet operator may, whatever workspace its token is for; a workspace admin who is not one may not`, async () => {
      expect((await api(h.url, "POST", `/v1/runners/${fresh()}/${verb}`, { token: TOKENS.admin })).status).toBe(200);
      expectError(await api(h.url, "POST", `/v1/runners/${fresh()}/${verb}`, { token: TOKENS.eve }), 403, "forbidden");
      await seedMember(h.nc, { workspaceId: FLEET_WORKSPACE, actorId: "eve", role: "admin" });
      try {
        const r = await api(h.url, "POST", `/v1/runners/${fresh()}/${verb}`, { token: TOKENS.eve });
        expect(r.status).toBe(200);
        expect(stateCalls()[1]?.request).toMatchObject({ scope: { workspaceId: WS2, actor: { id: "eve" } } });
      } finally {
        await seedMember(h.nc, { workspaceId: FLEET_WORKSPACE, actorId: "eve", role: "member" });
      }
    });
  }

  it("decides on the current membership of the fleet: a demoted operator is forbidden at once", async () => {
    const id = fresh();
    await seedMember(h.nc, { workspaceId: FLEET_WORKSPACE, actorId: "bob", role: "admin" });
    expect((await api(h.url, "POST", `/v1/runners/${id}/cordon`, { token: TOKENS.bob })).status).toBe(200);
    await seedMember(h.nc, { workspaceId: FLEET_WORKSPACE, actorId: "bob", role: "member" });
    expectError(await api(h.url, "POST", `/v1/runners/${id}/uncordon`, { token: TOKENS.bob }), 403, "forbidden");
    expect(stateCalls()).toHaveLength(1);
  });

  it("a fleet operator's session token is not an operator", async () => {
    await seedMember(h.nc, { workspaceId: FLEET_WORKSPACE, actorId: `svc-${SVC_SESSION}`, role: "admin" });
    expectError(await api(h.url, "POST", `/v1/runners/${fresh()}/drain`, { token: TOKENS.svc }), 403, "forbidden");
    expect(stateCalls()).toEqual([]);
  });
});

describe("runner state changes: bad input calls nothing", () => {
  const badTokens: Array<Record<string, string>> = [
    {},
    { authorization: "Bearer tok_not_a_real_token" },
    { authorization: `Bearer ${TOKENS.expired}` },
    { authorization: `Basic ${TOKENS.admin}` },
    { authorization: `Bearer` },
  ];
  for (const [verb] of ROUTES) {
    it(`${verb}: missing, wrong, expired and malformed tokens are unauthenticated`, async () => {
      for (const headers of badTokens) expectError(await api(h.url, "POST", `/v1/runners/r1/${verb}`, { headers }), 401, "unauthenticated");
      // Authentication comes first: even a bad id or body is unauthenticated without a token.
      expectError(await api(h.url, "POST", `/v1/runners/a.b/${verb}`, { body: "{not json" }), 401, "unauthenticated");
      expect(h.scheduler.calls).toEqual([]);
    });

    it(`${verb}: invalid JSON, unknown fields, wrong types, non-objects are invalid`, async () => {
      const id = fresh();
      const bodies = ["{not json", "{", body({ state: "active" }), body({ surprise: 1 }), "[]", "null", "true", "1", '"x"', body({ force: "yes" })];
      for (const bad of bodies) {
        expectError(await api(h.url, "POST", `/v1/runners/${id}/${verb}`, { token: TOKENS.admin, body: bad }), 400, "invalid");
      }
      expect(h.scheduler.calls).toEqual([]);
    });

    it(`${verb}: bad ids and unknown or repeated query parameters are invalid`, async () => {
      for (const badId of ["bad%2Eid", "x".repeat(65), "a%20b", "%E0%A4%A", "*", ">"]) {
        expectError(await api(h.url, "POST", `/v1/runners/${badId}/${verb}`, { token: TOKENS.admin }), 400, "invalid");
      }
      for (const q of ["x=1", "state=active", "force=true&force=true"]) {
        expectError(await api(h.url, "POST", `/v1/runners/r1/${verb}?${q}`, { token: TOKENS.admin }), 400, "invalid");
      }
      expect(h.scheduler.calls).toEqual([]);
    });

    it(`${verb}: bad input is invalid even for a member (validation precedes authorization)`, async () => {
      expectError(await api(h.url, "POST", `/v1/runners/r1/${verb}`, { token: TOKENS.alice, body: body({ x: 1 }) }), 400, "invalid");
      expect(h.scheduler.calls).toEqual([]);
    });

    it(`${verb}: an oversize body is too_large (declared or chunked)`, async () => {
      const big = body({ pad: "x".repeat(5000) });
      expectError(await api(h.url, "POST", `/v1/runners/r1/${verb}`, { token: TOKENS.admin, body: big }), 413, "too_large");
      const chunked = await new Promise<{ status: number; text: string }>((resolve, reject) => {
        const u = new URL(`${h.url}/v1/runners/r1/${verb}`);
        const req = httpRequest(
          { host: u.hostname, port: u.port, path: u.pathname, method: "POST", headers: { authorization: `Bearer ${TOKENS.admin}` } },
          (res) => {
            let text = "";
            res.on("data", (d: Buffer) => (text += d.toString()));
            res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
          },
        );
        req.on("error", reject);
        req.write(`{"pad":"${"x".repeat(5000)}`); // no end(): the server must not wait for it
      });
      expect(chunked.status).toBe(413);
      expect(JSON.parse(chunked.text)).toMatchObject({ error: { code: "too_large" } });
      expect(h.scheduler.calls).toEqual([]);
    });

    it(`${verb}: a wrong method is 405 invalid with Allow: POST`, async () => {
      for (const method of ["GET", "PUT", "PATCH", "DELETE"]) {
        const r = await api(h.url, method, `/v1/runners/r1/${verb}`, { token: TOKENS.admin, ...(method === "GET" || method === "DELETE" ? {} : { body: "{}" }) });
        expectError(r, 405, "invalid");
        expect(r.headers.get("allow")).toBe("POST");
      }
      expect(h.scheduler.calls).toEqual([]);
    });
  }

  it("an unknown runner verb is not_found", async () => {
    expectError(await api(h.url, "POST", "/v1/runners/r1/reboot", { token: TOKENS.admin }), 404, "not_found");
    expectError(await api(h.url, "POST", "/v1/runners/r1/drain/now", { token: TOKENS.admin }), 404, "not_found");
    expect(h.scheduler.calls).toEqual([]);
  });
});

describe("GET /v1/runners/:id", () => {
  it("a member gets the runner, found through listRunners pages", async () => {
    const id = fresh();
    const r = await api(h.url, "GET", `/v1/runners/${id}`, { token: TOKENS.alice });
    expect(r.status).toBe(200);
    expect(r.json).toEqual(h.scheduler.runners.get(id));
    expect(h.scheduler.callsOf("listRunners")[0]?.request).toEqual({ scope: { workspaceId: WS1, actor: { id: "alice", kind: "user" } }, limit: MAX_PAGE_LIMIT });
    expect(stateCalls()).toEqual([]);
  });

  it("walks every page until the runner is found, then stops", async () => {
    for (let i = 0; i < MAX_PAGE_LIMIT + 5; i++) h.scheduler.putRunner(makeRunner({ id: `bulk${i}` }));
    const last = `bulk${MAX_PAGE_LIMIT + 4}`;
    const r = await api(h.url, "GET", `/v1/runners/${last}`, { token: TOKENS.bob });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ id: last });
    const pages = h.scheduler.callsOf("listRunners").map((c) => c.request as { cursor?: string });
    expect(pages).toHaveLength(2);
    expect(pages[0]?.cursor).toBeUndefined();
    expect(pages[1]?.cursor).toBe(String(MAX_PAGE_LIMIT));
    h.scheduler.calls.length = 0;
    expect((await api(h.url, "GET", `/v1/runners/${RUNNER.id}`, { token: TOKENS.bob })).status).toBe(200);
    expect(h.scheduler.callsOf("listRunners")).toHaveLength(1);
    for (let i = 0; i < MAX_PAGE_LIMIT + 5; i++) h.scheduler.runners.delete(`bulk${i}`);
  });

  it("an unknown runner is not_found after the last page", async () => {
    expectError(await api(h.url, "GET", "/v1/runners/missing", { token: TOKENS.alice }), 404, "not_found");
    expect(h.scheduler.callsOf("listRunners")).toHaveLength(1);
  });

  it("shows a runner's new state after a change, and a lost runner's reason", async () => {
    const id = fresh();
    await api(h.url, "POST", `/v1/runners/${id}/drain`, { token: TOKENS.admin });
    expect((await api(h.url, "GET", `/v1/runners/${id}`, { token: TOKENS.alice })).json.state).toBe("draining");
    h.scheduler.putRunner(makeRunner({ id: "gone", state: "lost", lostReason: "lease expired" }));
    expect((await api(h.url, "GET", "/v1/runners/gone", { token: TOKENS.alice })).json).toMatchObject({ state: "lost", lostReason: "lease expired" });
  });

  it("an outsider or a session's service token is forbidden; bad tokens unauthenticated; nothing called", async () => {
    expectError(await api(h.url, "GET", "/v1/runners/r1", { token: TOKENS.outsider }), 403, "forbidden");
    expectError(await api(h.url, "GET", "/v1/runners/r1", { token: TOKENS.svc }), 403, "forbidden");
    const badTokens: Array<Record<string, string>> = [{}, { authorization: "Bearer tok_not_a_real_token" }, { authorization: `Bearer ${TOKENS.expired}` }];
    for (const headers of badTokens) {
      expectError(await api(h.url, "GET", "/v1/runners/r1", { headers }), 401, "unauthenticated");
    }
    expect(h.scheduler.calls).toEqual([]);
  });

  it("bad ids and any query parameter are invalid; wrong methods 405", async () => {
    for (const badId of ["bad%2Eid", "x".repeat(65), "a%20b"]) {
      expectError(await api(h.url, "GET", `/v1/runners/${badId}`, { token: TOKENS.alice }), 400, "invalid");
    }
    for (const q of ["x=1", "limit=1", "cursor=abc"]) expectError(await api(h.url, "GET", `/v1/runners/r1?${q}`, { token: TOKENS.alice }), 400, "invalid");
    for (const method of ["POST", "PUT", "PATCH", "DELETE"]) {
      const r = await api(h.url, method, "/v1/runners/r1", { token: TOKENS.admin, ...(method === "DELETE" ? {} : { body: "{}" }) });
      expectError(r, 405, "invalid");
      expect(r.headers.get("allow")).toBe("GET");
    }
    expect(h.scheduler.calls).toEqual([]);
  });
});

describe("GET /v1/runners", () => {
  it("pages with the scheduler's cursor: nextCursor only when there is more", async () => {
    fresh();
    const first = await api(h.url, "GET", "/v1/runners?limit=1", { token: TOKENS.alice });
    expect(first.status).toBe(200);
    expect(first.json.runners).toHaveLength(1);
    expect(first.json.nextCursor).toBe("1");
    const rest = await api(h.url, "GET", `/v1/runners?limit=500&cursor=${first.json.nextCursor as string}`, { token: TOKENS.alice });
    expect(rest.json.nextCursor).toBeUndefined();
    expect(rest.json.runners.length).toBe(h.scheduler.runners.size - 1);
    expect(h.scheduler.callsOf("listRunners")[1]?.request).toMatchObject({ limit: 500, cursor: "1" });
  });
});
