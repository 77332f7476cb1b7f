/** API tokens, attach tickets, the WebSocket Origin allowlist, and the limits (issue 7, items 1, 3 and 6). */
import { Kvm } from "@nats-io/kv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Buckets, CLOSE_REVOKED, Subjects, TokenValue } from "@paddock/contracts";
import { hashToken, memberKey, seedMember, seedToken } from "./auth.ts";
import {
  api,
  Collector,
  makeSession,
  ManualAfter,
  NOW,
  openOk,
  openTerminal,
  startHarness,
  useHarness,
  TOKENS,
  WS1,
  WS2,
  type Harness,
} from "../testing/testkit.ts";

const json = (v: unknown) => JSON.stringify(v);
let clock = NOW;
const timers = new ManualAfter();
let n = 0;

const h = useHarness({ now: () => clock, after: timers.after, config: { allowedOrigins: ["https://app.example"] } });

/** A fresh running session of alice's in WS1. */
function newSession(workspaceId = WS1, creatorId = "alice"): string {
  const id = `k${++n}`;
  h.scheduler.put(makeSession({ id, workspaceId, creatorId }));
  return id;
}

async function mint(token: string, body: unknown = {}): Promise<{ token: string; id: string; expiresAt?: number }> {
  const r = await api(h.url, "POST", "/v1/tokens", { token, body: json(body) });
  expect(r.status, r.text).toBe(201);
  return r.json as { token: string; id: string; expiresAt?: number };
}

async function ticket(token: string, sessionId: string, body: unknown = {}): Promise<string> {
  const r = await api(h.url, "POST", `/v1/sessions/${sessionId}/attach-ticket`, { token, body: json(body) });
  expect(r.status, r.text).toBe(201);
  return (r.json as { ticket: string }).ticket;
}

describe("POST /v1/tokens", () => {
  it("mints a random pdk_ token shown once, stored only as its sha256, scoped to the caller", async () => {
    const r = await api(h.url, "POST", "/v1/tokens", { token: TOKENS.alice, body: json({ label: "laptop", expiresInMs: 3_600_000 }) });
    expect(r.status).toBe(201);
    expect(r.json).toMatchObject({ workspaceId: WS1, actor: { id: "alice", kind: "user" }, label: "laptop", createdAt: clock, expiresAt: clock + 3_600_000 });
    const token = r.json.token as string;
    expect(TokenValue.safeParse(token).success).toBe(true);
    expect(Object.keys(r.json as object).sort()).toEqual(["actor", "createdAt", "expiresAt", "id", "label", "token", "workspaceId"]);
    // Only the hash is a key; no value anywhere in the bucket holds the token.
    const kv = await new Kvm(h.nc).open(Buckets.tokens);
    expect((await kv.get(hashToken(token)))?.json()).toMatchObject({ id: r.json.id, workspaceId: WS1 });
    for await (const key of await kv.keys()) {
      const v = await kv.get(key);
      expect(key).not.toContain(token);
      expect(v?.string() ?? "").not.toContain(token);
    }
    // It works like any token of alice's.
    expect((await api(h.url, "GET", "/v1/sessions", { token })).status).toBe(200);
    const other = await mint(TOKENS.alice);
    expect(other.token).not.toBe(token);
    expect(other).not.toHaveProperty("expiresAt");
  });

  it("an empty body is {}", async () => {
    const r = await api(h.url, "POST", "/v1/tokens", { token: TOKENS.alice });
    expect(r.status).toBe(201);
  });

  it.each([
    ["invalid JSON", "{", 400],
    ["unknown field", json({ label: "x", scope: "admin" }), 400],
    ["label not a string", json({ label: 5 }), 400],
    ["empty label", json({ label: "" }), 400],
    ["label too long", json({ label: "x".repeat(129) }), 400],
    ["expiresInMs as a string", json({ expiresInMs: "1h" }), 400],
    ["expiresInMs zero", json({ expiresInMs: 0 }), 400],
    ["expiresInMs fractional", json({ expiresInMs: 1500.5 }), 400],
    ["expiresInMs over a year", json({ expiresInMs: 400 * 24 * 3_600_000 }), 400],
    ["a JSON array", json([]), 400],
    ["oversize", json({ label: "x".repeat(5000) }), 413],
  ])("%s", async (_what, body, status) => {
    const r = await api(h.url, "POST", "/v1/tokens", { token: TOKENS.alice, body });
    expect(r.status).toBe(status);
    expect(r.json.error.code).toBe(status === 413 ? "too_large" : "invalid");
  });

  it("refuses a query, no/wrong/expired token (401), a non-member and a session's service token (403)", async () => {
    expect((await api(h.url, "POST", "/v1/tokens?x=1", { token: TOKENS.alice })).status).toBe(400);
    const bodies = new Set<string>();
    for (const token of [undefined, "tok_nope_0000000000", TOKENS.expired]) {
      const r = await api(h.url, "POST", "/v1/tokens", { ...(token ? { token } : {}), body: "{}" });
      expect(r.status).toBe(401);
      bodies.add(JSON.stringify(r.json));
    }
    // No oracle: missing, unknown and expired tokens answer the very same body.
    expect([...bodies]).toEqual([JSON.stringify({ error: { code: "unauthenticated", message: "missing or invalid token" } })]);
    expect((await api(h.url, "POST", "/v1/tokens", { token: TOKENS.outsider, body: "{}" })).json.error.code).toBe("forbidden");
    const svc = await api(h.url, "POST", "/v1/tokens", { token: TOKENS.svc, body: "{}" });
    expect(svc.status).toBe(403);
    expect(svc.json.error.message).toMatch(/service principal/);
  });

  it("an expiring token cannot mint one that outlives it", async () => {
    const short = await mint(TOKENS.alice, { expiresInMs: 60_000 });
    const r = await api(h.url, "POST", "/v1/tokens", { token: short.token, body: "{}" });
    expect(r.status).toBe(400);
    expect(r.json.error.message).toMatch(/outlive/);
    expect((await api(h.url, "POST", "/v1/tokens", { token: short.token, body: json({ expiresInMs: 120_000 }) })).status).toBe(400);
    expect((await api(h.url, "POST", "/v1/tokens", { token: short.token, body: json({ expiresInMs: 30_000 }) })).status).toBe(201);
  });

  it("expires on the injected clock", async () => {
    const t = await mint(TOKENS.bob, { expiresInMs: 10_000 });
    expect((await api(h.url, "GET", "/v1/tokens", { token: t.token })).status).toBe(200);
    clock += 10_000;
    try {
      const r = await api(h.url, "GET", "/v1/tokens", { token: t.token });
      expect(r.status).toBe(401);
      expect(r.json.error.code).toBe("unauthenticated");
    } finally {
      clock -= 10_000;
    }
  });
});

describe("GET /v1/tokens and DELETE /v1/tokens/:id", () => {
  it("lists only the caller's own tokens, never the value or the hash", async () => {
    const mine = await mint(TOKENS.bob, { label: "bob-ci" });
    const theirs = await mint(TOKENS.alice, { label: "alice-ci" });
    const r = await api(h.url, "GET", "/v1/tokens", { token: TOKENS.bob });
    expect(r.status).toBe(200);
    const ids = (r.json.tokens as Array<{ id: string }>).map((t) => t.id);
    expect(ids).toContain(mine.id);
    expect(ids).not.toContain(theirs.id);
    expect(r.text).not.toContain(mine.token);
    expect(r.text).not.toContain(hashToken(mine.token));
    for (const t of r.json.tokens as Array<Record<string, unknown>>) {
      expect(t.actor).toEqual({ id: "bob", kind: "user" });
      expect(Object.keys(t).every((k) => ["id", "workspaceId", "actor", "label", "createdAt", "expiresAt"].includes(k))).toBe(true);
    }
    // Eve (another workspace) sees none of WS1's.
    const eve = await api(h.url, "GET", "/v1/tokens", { token: TOKENS.eve });
    expect(eve.json.tokens.map((t: { id: string }) => t.id)).not.toContain(mine.id);
    expect((await api(h.url, "GET", "/v1/tokens?limit=5", { token: TOKENS.bob })).status).toBe(400);
    expect((await api(h.url, "GET", "/v1/tokens")).status).toBe(401);
    expect((await api(h.url, "GET", "/v1/tokens", { token: TOKENS.outsider })).status).toBe(403);
  });

  it("revokes: the token fails at once; its owner or an admin may, another member may not, another workspace sees not_found", async () => {
    const t = await mint(TOKENS.alice, { label: "to-revoke" });
    expect((await api(h.url, "DELETE", `/v1/tokens/${t.id}`, { token: TOKENS.bob })).json.error.code).toBe("forbidden");
    expect((await api(h.url, "DELETE", `/v1/tokens/${t.id}`, { token: TOKENS.eve })).json.error.code).toBe("not_found");
    expect((await api(h.url, "DELETE", `/v1/tokens/${t.id}?x=1`, { token: TOKENS.alice })).status).toBe(400);
    expect((await api(h.url, "DELETE", "/v1/tokens/a.b", { token: TOKENS.alice })).status).toBe(400);
    expect((await api(h.url, "DELETE", `/v1/tokens/${t.id}`)).status).toBe(401);
    expect((await api(h.url, "GET", "/v1/sessions", { token: t.token })).status).toBe(200);
    const r = await api(h.url, "DELETE", `/v1/tokens/${t.id}`, { token: TOKENS.alice });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ id: t.id, label: "to-revoke" });
    expect(r.text).not.toContain(t.token);
    expect((await api(h.url, "GET", "/v1/sessions", { token: t.token })).status).toBe(401);
    expect((await api(h.url, "DELETE", `/v1/tokens/${t.id}`, { token: TOKENS.alice })).status).toBe(404);
    expect((await api(h.url, "GET", "/v1/tokens", { token: TOKENS.alice })).json.tokens.map((x: { id: string }) => x.id)).not.toContain(t.id);

    const byAdmin = await mint(TOKENS.alice);
    expect((await api(h.url, "DELETE", `/v1/tokens/${byAdmin.id}`, { token: TOKENS.admin })).status).toBe(200);
    expect((await api(h.url, "GET", "/v1/sessions", { token: byAdmin.token })).status).toBe(401);
    expect((await api(h.url, "DELETE", "/v1/tokens/tok_unknown", { token: TOKENS.admin })).status).toBe(404);
  });

  it("a revoked token closes its open WebSocket with 4003", async () => {
    const t = await mint(TOKENS.alice);
    const id = newSession();
    const c = await openOk(h.wsUrl, id, "", t.token);
    expect(await c.nextText()).toMatchObject({ type: "hello" });
    // A socket of another token of the same actor is not affected.
    const other = await openOk(h.wsUrl, id, "", TOKENS.alice);
    expect(await other.nextText()).toMatchObject({ type: "hello" });
    expect((await api(h.url, "DELETE", `/v1/tokens/${t.id}`, { token: TOKENS.alice })).status).toBe(200);
    for (;;) {
      const f = await c.next();
      if (f.kind === "text" && f.value.type === "error") {
        expect(f.value).toMatchObject({ code: "unauthenticated", message: "token revoked" });
        break;
      }
    }
    expect(await c.closed).toEqual({ code: CLOSE_REVOKED, reason: "token revoked" });
    // the other socket is still open and served
    expect(other.ws.readyState).toBe(other.ws.OPEN);
    other.close();
  });

  it("an expiring token's open WebSocket is closed with 4003 when it expires (injected clock and timer)", async () => {
    const t = await mint(TOKENS.alice, { expiresInMs: 5_000 });
    const c = await openOk(h.wsUrl, newSession(), "", t.token);
    expect(await c.nextText()).toMatchObject({ type: "hello" });
    expect(timers.armed).toContain(5_000);
    timers.fire(); // early: the clock says not yet, so it re-arms
    expect(c.ws.readyState).toBe(c.ws.OPEN);
    clock += 5_000;
    try {
      timers.fire();
      expect(await c.closed).toEqual({ code: CLOSE_REVOKED, reason: "token expired" });
    } finally {
      clock -= 5_000;
    }
  });
});

describe("attach tickets", () => {
  it("a ticket opens the socket without an Authorization header, once", async () => {
    const id = newSession();
    const r = await api(h.url, "POST", `/v1/sessions/${id}/attach-ticket`, { token: TOKENS.alice, body: json({ mode: "controller" }) });
    expect(r.status).toBe(201);
    expect(r.json).toEqual({ ticket: expect.stringMatching(/^pdt_/), expiresAt: clock + 30_000 });
    const t = r.json.ticket as string;
    const c = await openOk(h.wsUrl, id, `ticket=${t}`, "");
    expect(await c.nextText()).toMatchObject({ type: "hello", mode: "controller" });
    const again = await openTerminal(h.wsUrl, id, `ticket=${t}`);
    expect(again).toMatchObject({ ok: false, status: 401 });
    c.close();
  });

  it("two concurrent uses of one ticket: exactly one wins", async () => {
    const id = newSession();
    const t = await ticket(TOKENS.alice, id);
    const results = await Promise.all([openTerminal(h.wsUrl, id, `ticket=${t}`), openTerminal(h.wsUrl, id, `ticket=${t}`), openTerminal(h.wsUrl, id, `ticket=${t}`)]);
    expect(results.filter((r) => r.ok)).toHaveLength(1);
    expect(results.filter((r) => !r.ok).map((r) => (r.ok ? 0 : r.status))).toEqual([401, 401]);
    for (const r of results) if (r.ok) r.client.close();
  });

  it("refuses an expired ticket, one for another session, a malformed one, and one whose token was revoked", async () => {
    const id = newSession();
    const expired = await ticket(TOKENS.alice, id);
    clock += 30_000;
    try {
      expect(await openTerminal(h.wsUrl, id, `ticket=${expired}`)).toMatchObject({ ok: false, status: 401 });
    } finally {
      clock -= 30_000;
    }
    const elsewhere = await ticket(TOKENS.alice, id);
    expect(await openTerminal(h.wsUrl, newSession(), `ticket=${elsewhere}`)).toMatchObject({ ok: false, status: 401 });
    expect(await openTerminal(h.wsUrl, id, `ticket=pdt_nope`)).toMatchObject({ ok: false, status: 401 });
    expect(await openTerminal(h.wsUrl, id, `ticket=${TOKENS.alice}`)).toMatchObject({ ok: false, status: 401 });
    const minted = await mint(TOKENS.alice);
    const orphan = await ticket(minted.token, id);
    await api(h.url, "DELETE", `/v1/tokens/${minted.id}`, { token: TOKENS.alice });
    const refused = await openTerminal(h.wsUrl, id, `ticket=${orphan}`);
    expect(refused).toMatchObject({ ok: false, status: 401 });
    // Every token failure, ticket or header, expired or unknown, says the same.
    const byHeader = await openTerminal(h.wsUrl, id, "", TOKENS.expired);
    if (refused.ok || byHeader.ok) throw new Error("expected refusals");
    expect(JSON.parse(refused.body)).toEqual({ error: { code: "unauthenticated", message: "missing or invalid token" } });
    expect(JSON.parse(byHeader.body)).toEqual(JSON.parse(refused.body));
  });

  it("re-checks the policy at use: a membership removed after issue is refused (the session is not_found to a non-member)", async () => {
    await seedMember(h.nc, { workspaceId: WS1, actorId: "carol", role: "member" });
    await seedToken(h.nc, "tok_carol_0123456789abcdef", { workspaceId: WS1, actor: { id: "carol", kind: "user" }, createdAt: NOW });
    const id = newSession();
    const t = await ticket("tok_carol_0123456789abcdef", id);
    await (await new Kvm(h.nc).open(Buckets.members)).delete(memberKey(WS1, "carol"));
    expect(await openTerminal(h.wsUrl, id, `ticket=${t}`)).toMatchObject({ ok: false, status: 404 });
  });

  it("never a token in the query; not a ticket and a header together; the ticket's mode is the mode", async () => {
    const id = newSession();
    const tok = await openTerminal(h.wsUrl, id, `token=${TOKENS.alice}`);
    expect(tok).toMatchObject({ ok: false, status: 400 });
    if (!tok.ok) expect(tok.body).toMatch(/never put a token in a URL/);
    expect(await openTerminal(h.wsUrl, id, `access_token=${TOKENS.alice}`)).toMatchObject({ ok: false, status: 400 });
    const t = await ticket(TOKENS.alice, id);
    expect(await openTerminal(h.wsUrl, id, `ticket=${t}`, TOKENS.alice)).toMatchObject({ ok: false, status: 400 });
    expect(await openTerminal(h.wsUrl, id, `ticket=${t}&since=never`)).toMatchObject({ ok: false, status: 400 });
    // a bad query does not burn the ticket, nor does a mode it is not for (checked before it is spent)
    const viewer = await openTerminal(h.wsUrl, id, `ticket=${t}&mode=controller`);
    expect(viewer).toMatchObject({ ok: false, status: 400 });
    if (!viewer.ok) expect(viewer.body).toMatch(/the ticket is for viewer/);
    const ok = await openOk(h.wsUrl, id, `ticket=${t}&mode=viewer`, "");
    expect(await ok.nextText()).toMatchObject({ type: "hello", mode: "viewer" });
    ok.close();
    // Spent now: any later use is refused.
    expect(await openTerminal(h.wsUrl, id, `ticket=${t}`)).toMatchObject({ ok: false, status: 401 });
  });

  it("minting: bad input, authorization as for the attach itself, another workspace not_found", async () => {
    const id = newSession();
    const path = `/v1/sessions/${id}/attach-ticket`;
    for (const body of ["{", json({ mode: "boss" }), json({ mode: 1 }), json({ mode: "viewer", app: "x" }), json([])]) {
      expect((await api(h.url, "POST", path, { token: TOKENS.alice, body })).status, body).toBe(400);
    }
    expect((await api(h.url, "POST", path, { token: TOKENS.alice, body: json({ mode: "x".repeat(5000) }) })).status).toBe(413);
    expect((await api(h.url, "POST", `${path}?mode=viewer`, { token: TOKENS.alice })).status).toBe(400);
    expect((await api(h.url, "POST", path)).status).toBe(401);
    expect((await api(h.url, "POST", path, { token: TOKENS.expired })).status).toBe(401);
    // Not a member: the session is the 404 of one that does not exist.
    expect((await api(h.url, "POST", path, { token: TOKENS.outsider })).status).toBe(404);
    // bob is a member: a viewer ticket yes, a controller ticket of alice's session no
    expect((await api(h.url, "POST", path, { token: TOKENS.bob })).status).toBe(201);
    expect((await api(h.url, "POST", path, { token: TOKENS.bob, body: json({ mode: "controller" }) })).json.error.code).toBe("forbidden");
    const theirs = newSession(WS2, "eve");
    expect((await api(h.url, "POST", `/v1/sessions/${theirs}/attach-ticket`, { token: TOKENS.alice })).json.error.code).toBe("not_found");
    expect((await api(h.url, "POST", "/v1/sessions/no.pe/attach-ticket", { token: TOKENS.alice })).status).toBe(400);
  });
});

describe("Origin allowlist", () => {
  it("an upgrade with a foreign Origin is 403; an allowed one (any case) and none pass", async () => {
    const id = newSession();
    const bad = await openTerminal(h.wsUrl, id, "", TOKENS.alice, { origin: "https://evil.example" });
    expect(bad).toMatchObject({ ok: false, status: 403 });
    if (!bad.ok) expect(JSON.parse(bad.body)).toEqual({ error: { code: "forbidden", message: "origin not allowed" } });
    expect(await openTerminal(h.wsUrl, id, "", TOKENS.alice, { origin: "null" })).toMatchObject({ ok: false, status: 403 });
    const t = await ticket(TOKENS.alice, id);
    expect(await openTerminal(h.wsUrl, id, `ticket=${t}`, undefined, { origin: "https://app.example.evil" })).toMatchObject({ ok: false, status: 403 });
    for (const origin of ["https://app.example", "HTTPS://APP.EXAMPLE"]) {
      const r = await openTerminal(h.wsUrl, id, "", TOKENS.alice, { origin });
      expect(r.ok, origin).toBe(true);
      if (r.ok) r.client.close();
    }
  });
});

describe("limits (a harness with small ones)", () => {
  let l: Harness;
  let lclock = NOW;
  beforeAll(async () => {
    l = await startHarness({
      now: () => lclock,
      config: { createsPerMinute: 2, wsInputFramesPerSecond: 3, maxAttachPerSession: 2 },
    });
  });
  afterAll(async () => {
    await l.stop();
  });

  it("an empty allowlist refuses every browser origin", async () => {
    l.scheduler.put(makeSession({ id: "o1", workspaceId: WS1, creatorId: "alice" }));
    expect(await openTerminal(l.wsUrl, "o1", "", TOKENS.alice, { origin: "http://localhost:3000" })).toMatchObject({ ok: false, status: 403 });
  });

  it("creates per minute per token: 429 rate_limited with Retry-After, per token, until the window passes", async () => {
    const create = (token: string) => api(l.url, "POST", "/v1/sessions", { token, body: json({ spec: { cmd: ["sh"] } }) });
    expect((await create(TOKENS.alice)).status).toBe(201);
    lclock += 10_000;
    expect((await create(TOKENS.alice)).status).toBe(201);
    const over = await create(TOKENS.alice);
    expect(over.status).toBe(429);
    expect(over.json.error.code).toBe("rate_limited");
    expect(over.headers.get("retry-after")).toBe("50");
    // an invalid create spends nothing and is still invalid; another token has its own budget
    expect((await api(l.url, "POST", "/v1/sessions", { token: TOKENS.bob, body: "{" })).status).toBe(400);
    expect((await create(TOKENS.bob)).status).toBe(201);
    // token mints count as creates too
    expect((await api(l.url, "POST", "/v1/tokens", { token: TOKENS.alice })).status).toBe(429);
    lclock += 50_000;
    expect((await create(TOKENS.alice)).status).toBe(201);
  });

  it("attach connections per session: the third is 429 before the upgrade; a freed slot is usable again", async () => {
    l.scheduler.put(makeSession({ id: "a1", workspaceId: WS1, creatorId: "alice" }));
    const a = await openOk(l.wsUrl, "a1", "", TOKENS.alice);
    const b = await openOk(l.wsUrl, "a1", "", TOKENS.bob);
    const third = await openTerminal(l.wsUrl, "a1", "", TOKENS.admin);
    expect(third).toMatchObject({ ok: false, status: 429 });
    if (!third.ok) expect(JSON.parse(third.body).error.code).toBe("rate_limited");
    // another session is not affected
    l.scheduler.put(makeSession({ id: "a2", workspaceId: WS1, creatorId: "alice" }));
    const other = await openOk(l.wsUrl, "a2", "", TOKENS.alice);
    other.close();
    a.close();
    await a.closed;
    while (l.gateway.terminals.openCount > 2) await new Promise((r) => setImmediate(r));
    let again = await openTerminal(l.wsUrl, "a1", "", TOKENS.admin);
    // the server may see the close a moment after the client: wait on its count, then retry once
    while (!again.ok && l.gateway.terminals.openCount >= 2) {
      await new Promise((r) => setImmediate(r));
      again = await openTerminal(l.wsUrl, "a1", "", TOKENS.admin);
    }
    expect(again.ok).toBe(true);
    if (again.ok) again.client.close();
    b.close();
  });

  it("input frames per second: the excess waits for the next window (the socket is not read meanwhile), nothing is dropped", async () => {
    l.scheduler.put(makeSession({ id: "r1", workspaceId: WS1, creatorId: "alice" }));
    const input = new Collector(l.nc, Subjects.input("default", "r1", "r1", "main"));
    const c = await openOk(l.wsUrl, "r1", "mode=controller", TOKENS.alice);
    expect(await c.nextText()).toMatchObject({ type: "hello" });
    for (const s of ["1", "2", "3", "4", "5"]) c.ws.send(Buffer.from(s), { binary: true });
    const got: string[] = [];
    for (let i = 0; i < 3; i++) got.push((await input.nextInput()).string());
    expect(got).toEqual(["1", "2", "3"]);
    // A sentinel published after the gateway had all five frames comes before 4 and 5: they wait on the clock.
    await l.nc.flush();
    l.nc.publish(Subjects.input("default", "r1", "r1", "main"), "sentinel");
    expect((await input.next()).string()).toBe("sentinel");
    lclock += 1_000;
    for (let i = 0; i < 2; i++) got.push((await input.nextInput()).string());
    expect(got).toEqual(["1", "2", "3", "4", "5"]);
    expect(c.ws.readyState).toBe(c.ws.OPEN);
    expect((await l.metrics.inputDropped.get()).values.find((v) => v.labels.reason === "rate_limited")).toBeUndefined();
    // no error frame: nothing was refused
    while (c.queued > 0) expect((await c.next()) as unknown).not.toMatchObject({ kind: "text", value: { type: "error" } });
    c.close();
    input.sub.unsubscribe();
  });
});
