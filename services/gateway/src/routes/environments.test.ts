import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_JSON_DEPTH } from "@paddock/contracts";
import { api, expectError, makeEnvironment, startHarness, TOKENS, useHarness, WS1, WS2, type Harness } from "../testing/testkit.ts";

const h = useHarness();

const body = (v: unknown) => JSON.stringify(v);

let n = 0;
function freshEnv(ws = WS1): string {
  const id = `e${++n}`;
  h.scheduler.putEnv(makeEnvironment({ id, workspaceId: ws, name: `env-${id}`, image: "node:20", setup: "npm ci", egressAllow: ["registry.npmjs.org"] }));
  return id;
}

describe("environment CRUD", () => {
  it("a member creates (201), gets and lists; the scope reaches the scheduler", async () => {
    const c = await api(h.url, "POST", "/v1/environments", {
      token: TOKENS.bob,
      body: body({ name: "node", image: "node:20", egressAllow: ["github.com"], secretRefs: [] }),
    });
    expect(c.status).toBe(201);
    expect(c.json).toMatchObject({ workspaceId: WS1, name: "node", image: "node:20", egressAllow: ["github.com"], secretRefs: [] });
    expect(h.scheduler.callsOf("createEnvironment")[0]?.request).toMatchObject({
      scope: { workspaceId: WS1, actor: { id: "bob" } },
      body: { name: "node" },
    });
    const g = await api(h.url, "GET", `/v1/environments/${c.json.id as string}`, { token: TOKENS.alice });
    expect(g.status).toBe(200);
    expect(g.json).toEqual(c.json);
    const l = await api(h.url, "GET", "/v1/environments?limit=1", { token: TOKENS.alice });
    expect(l.status).toBe(200);
    expect(l.json.environments).toHaveLength(1);
    expect(l.json.environments.every((e: { workspaceId: string }) => e.workspaceId === WS1)).toBe(true);
  });

  it("lists with the validated query: limit clamped to 500, cursor passed on, nextCursor only when there is more", async () => {
    freshEnv();
    freshEnv();
    const p = await api(h.url, "GET", "/v1/environments?limit=1&cursor=abc", { token: TOKENS.alice });
    expect(p.json.nextCursor).toBe("next");
    expect(h.scheduler.callsOf("listEnvironments")[0]?.request).toMatchObject({ limit: 1, cursor: "abc" });
    const all = await api(h.url, "GET", "/v1/environments?limit=100000", { token: TOKENS.alice });
    expect(all.json.nextCursor).toBeUndefined();
    expect(h.scheduler.callsOf("listEnvironments")[1]?.request).toMatchObject({ limit: 500 });
    await api(h.url, "GET", "/v1/environments", { token: TOKENS.alice });
    expect(h.scheduler.callsOf("listEnvironments")[2]?.request).toEqual({ scope: expect.any(Object), limit: 50 });
  });

  it("an admin updates with pointer semantics (absent unchanged, \"\" and [] clear) and deletes (200 Environment)", async () => {
    const id = freshEnv();
    const u = await api(h.url, "PATCH", `/v1/environments/${id}`, { token: TOKENS.admin, body: body({ setup: "", egressAllow: [], init: "make" }) });
    expect(u.status).toBe(200);
    expect(u.json).toMatchObject({ id, image: "node:20", egressAllow: [], init: "make" });
    expect(u.json.setup).toBeUndefined();
    expect(h.scheduler.callsOf("updateEnvironment")[0]?.request).toMatchObject({ environmentId: id, body: { setup: "", egressAllow: [], init: "make" } });
    const d = await api(h.url, "DELETE", `/v1/environments/${id}`, { token: TOKENS.admin });
    expect(d.status).toBe(200);
    expect(d.json).toMatchObject({ id, workspaceId: WS1 });
    expectError(await api(h.url, "GET", `/v1/environments/${id}`, { token: TOKENS.admin }), 404, "not_found");
  });

  it("members may not update or delete (forbidden): environments have no creator", async () => {
    const id = freshEnv();
    expectError(await api(h.url, "PATCH", `/v1/environments/${id}`, { token: TOKENS.alice, body: body({ name: "x" }) }), 403, "forbidden");
    expectError(await api(h.url, "DELETE", `/v1/environments/${id}`, { token: TOKENS.bob }), 403, "forbidden");
    expect(h.scheduler.callsOf("updateEnvironment")).toEqual([]);
    expect(h.scheduler.callsOf("deleteEnvironment")).toEqual([]);
  });

  it("only an admin creates an environment that references secrets: a member's is forbidden and reaches nothing", async () => {
    const refs = body({ name: "with-secret", secretRefs: ["GH_TOKEN"] });
    const refused = await api(h.url, "POST", "/v1/environments", { token: TOKENS.bob, body: refs });
    expectError(refused, 403, "forbidden");
    expect(refused.json.error.message).toContain("workspace admin");
    expect(h.scheduler.callsOf("createEnvironment")).toEqual([]);
    const made = await api(h.url, "POST", "/v1/environments", { token: TOKENS.admin, body: refs });
    expect(made.status).toBe(201);
    expect(made.json).toMatchObject({ secretRefs: ["GH_TOKEN"] });
    // Adding a reference later is an update: admins only, as before.
    const patched = await api(h.url, "PATCH", `/v1/environments/${made.json.id as string}`, { token: TOKENS.bob, body: body({ secretRefs: ["OTHER"] }) });
    expectError(patched, 403, "forbidden");
  });

  it("a non-member and a session's service token may do nothing with environments (an existing one is not_found to them)", async () => {
    const id = freshEnv();
    for (const token of [TOKENS.outsider, TOKENS.svc]) {
      expectError(await api(h.url, "POST", "/v1/environments", { token, body: body({ name: "x" }) }), 403, "forbidden");
      expectError(await api(h.url, "GET", "/v1/environments", { token }), 403, "forbidden");
      const existing = await api(h.url, "GET", `/v1/environments/${id}`, { token });
      const missing = await api(h.url, "GET", "/v1/environments/env_nope", { token });
      expectError(existing, 404, "not_found");
      expect(existing.json).toEqual(missing.json);
    }
    expect(h.scheduler.callsOf("createEnvironment")).toEqual([]);
    expect(h.scheduler.callsOf("listEnvironments")).toEqual([]);
  });

  it("another workspace's environment is not_found on every route, even for its admin", async () => {
    const theirs = freshEnv(WS2);
    expectError(await api(h.url, "GET", `/v1/environments/${theirs}`, { token: TOKENS.admin }), 404, "not_found");
    expectError(await api(h.url, "PATCH", `/v1/environments/${theirs}`, { token: TOKENS.admin, body: body({ name: "x" }) }), 404, "not_found");
    expectError(await api(h.url, "DELETE", `/v1/environments/${theirs}`, { token: TOKENS.admin }), 404, "not_found");
    const mine = await api(h.url, "GET", "/v1/environments", { token: TOKENS.admin });
    expect(mine.json.environments.some((e: { id: string }) => e.id === theirs)).toBe(false);
    expect(h.scheduler.callsOf("updateEnvironment")).toEqual([]);
    expect(h.scheduler.callsOf("deleteEnvironment")).toEqual([]);
  });
});

describe("environment routes: bad input calls nothing", () => {
  const routes: Array<[string, string, string?]> = [
    ["POST", "/v1/environments", body({ name: "x" })],
    ["GET", "/v1/environments"],
    ["GET", "/v1/environments/e1"],
    ["PATCH", "/v1/environments/e1", body({ name: "x" })],
    ["DELETE", "/v1/environments/e1"],
  ];
  const bad: Array<Record<string, string>> = [
    {},
    { authorization: "Bearer tok_not_a_real_token" },
    { authorization: `Bearer ${TOKENS.expired}` },
    { authorization: `Basic ${TOKENS.alice}` },
  ];
  for (const [method, path, b] of routes) {
    it(`${method} ${path}: missing, wrong, expired and malformed tokens are unauthenticated`, async () => {
      for (const headers of bad) expectError(await api(h.url, method, path, { headers, ...(b ? { body: b } : {}) }), 401, "unauthenticated");
      expect(h.scheduler.calls).toEqual([]);
    });

    it(`${method} ${path}: an unknown or repeated query parameter is invalid`, async () => {
      const q = method === "GET" && path === "/v1/environments" ? "?limit=1&limit=2" : "?x=1";
      expectError(await api(h.url, method, `${path}${q}`, { token: TOKENS.admin, ...(b ? { body: b } : {}) }), 400, "invalid");
      expect(h.scheduler.calls).toEqual([]);
    });
  }

  const badBodies: Array<[string, string]> = [
    ["invalid JSON", "{not json"],
    ["empty body", ""],
    ["array body", "[]"],
    ["unknown field", body({ name: "x", surprise: 1 })],
    ["unknown nested field", body({ name: "x", requirements: { gpu: 1 } })],
    ["wrong type", body({ name: "x", egressAllow: "github.com" })],
    ["bad secret name", body({ name: "x", secretRefs: ["has-dash"] })],
    ["too long a name", body({ name: "x".repeat(129) })],
    ["NUL in setup", body({ name: "x", setup: "make\u0000; curl evil" })],
    ["NUL in init", body({ name: "x", init: "true\u0000" })],
    ["NUL in the image", body({ name: "x", image: "img\u0000" })],
    ["NUL in the name", body({ name: "x\u0000y" })],
    ["a connector at the bound's edge", `{"name":"x","connectors":[{"type":"t","raw":${"[".repeat(MAX_JSON_DEPTH - 2)}${"]".repeat(MAX_JSON_DEPTH - 2)}}]}`],
  ];
  for (const [what, b] of badBodies) {
    it(`POST and PATCH answer invalid for ${what}`, async () => {
      const id = freshEnv();
      expectError(await api(h.url, "POST", "/v1/environments", { token: TOKENS.admin, body: b }), 400, "invalid");
      expectError(await api(h.url, "PATCH", `/v1/environments/${id}`, { token: TOKENS.admin, body: b }), 400, "invalid");
      expect(h.scheduler.calls).toEqual([]);
    });
  }

  // The reference grammar is the contract's (ImageRef): a reference no registry would take never reaches a runner.
  const badImages: Array<[string, string]> = [
    ["bad syntax", "reg.example.com/name:bad tag"],
    ["an upper-case repository", "Paddock/BusyBox"],
    ["a bad digest", "paddock/busybox@sha256:abc"],
    ["another digest algorithm", `paddock/busybox@md5:${"a".repeat(32)}`],
    ["an over-long name", `${"a/".repeat(200)}b`],
    ["an over-long reference", `${"a".repeat(500)}:${"t".repeat(20)}`],
    ["a port out of range", "reg:99999/name"],
  ];
  for (const [what, image] of badImages) {
    it(`POST and PATCH answer invalid for an image with ${what}, naming the field, and call nothing`, async () => {
      const id = freshEnv();
      const created = await api(h.url, "POST", "/v1/environments", { token: TOKENS.admin, body: body({ name: "x", image }) });
      expectError(created, 400, "invalid");
      expect(created.json.error.message).toContain("image");
      expectError(await api(h.url, "PATCH", `/v1/environments/${id}`, { token: TOKENS.admin, body: body({ image }) }), 400, "invalid");
      expect(h.scheduler.calls).toEqual([]);
    });
  }

  it(`takes JSON nested exactly ${String(MAX_JSON_DEPTH)} deep (the bound), and a connector's value as sent`, async () => {
    const raw = JSON.parse(`${"[".repeat(MAX_JSON_DEPTH - 3)}"deep"${"]".repeat(MAX_JSON_DEPTH - 3)}`) as unknown;
    const r = await api(h.url, "POST", "/v1/environments", { token: TOKENS.admin, body: body({ name: "deep", connectors: [{ type: "t", raw }] }) });
    expect(r.status).toBe(201);
    expect(h.scheduler.callsOf("createEnvironment")[0]?.request).toMatchObject({ body: { connectors: [{ type: "t", raw }] } });
  });

  it("POST needs a name; PATCH refuses an empty name (clearing is only for optional fields)", async () => {
    const id = freshEnv();
    expectError(await api(h.url, "POST", "/v1/environments", { token: TOKENS.admin, body: "{}" }), 400, "invalid");
    expectError(await api(h.url, "PATCH", `/v1/environments/${id}`, { token: TOKENS.admin, body: body({ name: "" }) }), 400, "invalid");
    expect(h.scheduler.calls).toEqual([]);
  });

  it("an oversize body is too_large", async () => {
    const big = body({ name: "x", setup: "y".repeat(5000) });
    expectError(await api(h.url, "POST", "/v1/environments", { token: TOKENS.admin, body: big }), 413, "too_large");
    expectError(await api(h.url, "PATCH", `/v1/environments/${freshEnv()}`, { token: TOKENS.admin, body: big }), 413, "too_large");
    expect(h.scheduler.calls).toEqual([]);
  });

  it("bad ids and bad list queries are invalid", async () => {
    for (const [method, b] of [["GET"], ["PATCH", body({ name: "x" })], ["DELETE"]] as const) {
      for (const id of ["bad%2Eid", "x".repeat(65)]) {
        expectError(await api(h.url, method, `/v1/environments/${id}`, { token: TOKENS.admin, ...(b ? { body: b } : {}) }), 400, "invalid");
      }
    }
    for (const q of ["limit=0", "limit=-1", "limit=abc", "limit=1.5", "cursor=", `cursor=${"c".repeat(513)}`, "other=1"]) {
      expectError(await api(h.url, "GET", `/v1/environments?${q}`, { token: TOKENS.alice }), 400, "invalid");
    }
    expect(h.scheduler.calls).toEqual([]);
  });

  it("a wrong method is 405 invalid", async () => {
    const r = await api(h.url, "PUT", "/v1/environments/e1", { token: TOKENS.admin, body: "{}" });
    expectError(r, 405, "invalid");
    expect(r.headers.get("allow")).toBe("GET, PATCH, DELETE");
  });
});

describe("deeply nested bodies at the default body limit", () => {
  let big: Harness;
  beforeAll(async () => {
    big = await startHarness({ config: { maxBodyBytes: 1024 * 1024 } });
  });
  afterAll(async () => {
    await big.stop();
  });

  it("a connector's value nested 100,000 deep within 1 MiB is invalid, not a 503 from encoding it for the scheduler", async () => {
    const deep = `{"name":"x","connectors":[{"type":"t","raw":${"[".repeat(100_000)}${"]".repeat(100_000)}}]}`;
    const r = await api(big.url, "POST", "/v1/environments", { token: TOKENS.admin, body: deep });
    expectError(r, 400, "invalid");
    expect(r.json.error.message).toContain(`nested deeper than ${String(MAX_JSON_DEPTH)}`);
    expect(big.scheduler.calls).toEqual([]);
  });
});
