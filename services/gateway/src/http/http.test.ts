import { request as httpRequest } from "node:http";
import { describe, expect, it } from "vitest";
import { jetstream } from "@nats-io/jetstream";
import { Buckets, MAX_JSON_DEPTH, Streams, Subjects, type AuditEvent } from "@paddock/contracts";
import { makeAuditEvent } from "@paddock/testing";
import { Kvm } from "@nats-io/kv";
import { memberKey, seedMember, seedToken } from "../auth/auth.ts";
import { LOG_CURSOR_HEADER } from "@paddock/contracts";
import { api, expectError, makeSession, NOW, publishChunk, SVC_SESSION, TOKENS, useHarness, WS1, WS2 } from "../testing/testkit.ts";

const h = useHarness();

const body = (v: unknown) => JSON.stringify(v);

describe("authentication", () => {
  const routes: Array<[string, string, string?]> = [
    ["POST", "/v1/sessions", body({ spec: {} })],
    ["GET", "/v1/sessions"],
    ["GET", "/v1/sessions/s1"],
    ["DELETE", "/v1/sessions/s1"],
    ["GET", "/v1/sessions/s1/log"],
    ["GET", "/v1/events"],
    ["GET", "/v1/runners"],
  ];
  const bad: Array<[string, Record<string, string>]> = [
    ["missing", {}],
    ["wrong", { authorization: "Bearer tok_not_a_real_token" }],
    ["expired", { authorization: `Bearer ${TOKENS.expired}` }],
    ["not bearer", { authorization: `Basic ${TOKENS.alice}` }],
  ];
  for (const [method, path, b] of routes) {
    it(`${method} ${path} refuses missing, wrong, expired and malformed tokens`, async () => {
      for (const [, headers] of bad) {
        const r = await api(h.url, method, path, { headers, ...(b ? { body: b } : {}) });
        expectError(r, 401, "unauthenticated");
      }
      expect(h.scheduler.calls).toEqual([]);
    });
  }
});

describe("POST /v1/sessions", () => {
  it("creates (201), and an idempotent replay answers 200 with the same session", async () => {
    const first = await api(h.url, "POST", "/v1/sessions", { token: TOKENS.alice, body: body({ spec: { cmd: ["sh"] }, idempotencyKey: "k1" }) });
    expect(first.status).toBe(201);
    expect(first.json).toMatchObject({ workspaceId: WS1, creatorId: "alice", spec: { cmd: ["sh"] } });
    const again = await api(h.url, "POST", "/v1/sessions", { token: TOKENS.alice, body: body({ spec: { cmd: ["sh"] }, idempotencyKey: "k1" }) });
    expect(again.status).toBe(200);
    expect(again.json).toEqual(first.json);
    expect(h.scheduler.callsOf("create")[0]?.request).toMatchObject({ scope: { workspaceId: WS1, actor: { id: "alice", kind: "user" } } });
  });

  const invalid: Array<[string, string]> = [
    ["invalid JSON", "{not json"],
    ["empty body", ""],
    ["unknown field", body({ spec: {}, surprise: 1 })],
    ["unknown nested field", body({ spec: { imagee: "x" } })],
    ["wrong type", body({ spec: { cmd: "sh" } })],
    ["missing spec", body({ name: "x" })],
    ["array body", "[]"],
    // A NUL would be cut by exec and the OS: the process would run something else than the record says.
    ["NUL in a command argument", body({ spec: { cmd: ["sh", "-c", "echo a\u0000rm -rf x"] } })],
    ["NUL in an app's command", body({ spec: { apps: [{ name: "web", cmd: ["node\u0000", "x"] }] } })],
    ["NUL in the image", body({ spec: { image: "img\u0000", cmd: ["true"] } })],
    // The contract's reference grammar (ImageRef): refused here, not as a failed session after placement.
    ["an upper-case image repository", body({ spec: { image: "Paddock/BusyBox:1", cmd: ["true"] } })],
    ["an image with a bad digest", body({ spec: { image: "paddock/busybox@sha256:abc", cmd: ["true"] } })],
    ["an image with a bad tag", body({ spec: { image: "paddock/busybox:-x", cmd: ["true"] } })],
    ["an over-long image name", body({ spec: { image: `${"a/".repeat(200)}b`, cmd: ["true"] } })],
    ["NUL in an egress host", body({ spec: { cmd: ["true"], egressAllow: ["a.example\u0000.evil"] } })],
    ["NUL in a repo path", body({ spec: { cmd: ["true"], repos: [{ url: "https://x/r.git", path: "src\u0000/x" }] } })],
    ["NUL in a repo url or ref", body({ spec: { cmd: ["true"] }, repos: [{ url: "https://x/r.git\u0000", ref: "main\u0000" }] })],
    [`JSON nested deeper than ${String(MAX_JSON_DEPTH)}`, `{"spec":{"cmd":["true"]},"x":${"[".repeat(MAX_JSON_DEPTH)}${"]".repeat(MAX_JSON_DEPTH)}}`],
  ];
  for (const [what, b] of invalid) {
    it(`answers invalid for ${what} and calls nothing`, async () => {
      expectError(await api(h.url, "POST", "/v1/sessions", { token: TOKENS.alice, body: b }), 400, "invalid");
      expect(h.scheduler.calls).toEqual([]);
    });
  }

  it("answers too_large for a body over the limit (declared length) and calls nothing", async () => {
    const big = body({ spec: { cmd: ["x".repeat(5000)] } });
    expectError(await api(h.url, "POST", "/v1/sessions", { token: TOKENS.alice, body: big }), 413, "too_large");
    expect(h.scheduler.calls).toEqual([]);
  });

  it("answers too_large for a chunked body that grows over the limit and never ends, without waiting for the rest", async () => {
    const status = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const u = new URL(`${h.url}/v1/sessions`);
      const req = httpRequest({ host: u.hostname, port: u.port, path: u.pathname, method: "POST", headers: { authorization: `Bearer ${TOKENS.alice}` } }, (res) => {
        let text = "";
        res.on("data", (d: Buffer) => (text += d.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      });
      req.on("error", reject);
      req.write(`{"spec":{"cmd":["${"x".repeat(5000)}`); // no end(): the server must not wait for it
    });
    expect(status.status).toBe(413);
    expect(JSON.parse(status.text)).toMatchObject({ error: { code: "too_large" } });
    expect(h.scheduler.calls).toEqual([]);
  });

  it("reads an oversized body to its end before answering, so a client still sending gets the 413 (not a reset)", async () => {
    // 2 MiB: without draining, the server's close resets the connection mid-upload and fetch fails (EPIPE).
    for (let i = 0; i < 5; i++) {
      const res = await fetch(`${h.url}/v1/sessions`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKENS.alice}`, "content-type": "application/json" },
        body: JSON.stringify({ spec: { cmd: ["x".repeat(2 * 1024 * 1024)] } }),
      });
      expect(res.status).toBe(413);
      expect(await res.json()).toMatchObject({ error: { code: "too_large" } });
    }
    expect(h.scheduler.calls).toEqual([]);
  });

  it("refuses unknown query parameters", async () => {
    expectError(await api(h.url, "POST", "/v1/sessions?x=1", { token: TOKENS.alice, body: body({ spec: {} }) }), 400, "invalid");
    expect(h.scheduler.calls).toEqual([]);
  });

  it("refuses a query parameter named __proto__ like any unknown one (it is not a prototype assignment)", async () => {
    expectError(await api(h.url, "POST", "/v1/sessions?__proto__=x", { token: TOKENS.alice, body: body({ spec: { cmd: ["true"] } }) }), 400, "invalid");
    expect(h.scheduler.calls).toEqual([]);
  });

  it("refuses a token whose actor is not a member (forbidden), calling nothing", async () => {
    expectError(await api(h.url, "POST", "/v1/sessions", { token: TOKENS.outsider, body: body({ spec: {} }) }), 403, "forbidden");
    expect(h.scheduler.calls).toEqual([]);
  });
});

describe("GET /v1/sessions", () => {
  it("lists one page with the validated query", async () => {
    h.scheduler.put(makeSession({ id: "list1", workspaceId: WS1, creatorId: "alice" }));
    const r = await api(h.url, "GET", "/v1/sessions?limit=1&includeTerminal=true&parentId=p1&cursor=abc", { token: TOKENS.bob });
    expect(r.status).toBe(200);
    expect(r.json.sessions).toHaveLength(1);
    expect(r.json.nextCursor).toBe("next");
    expect(h.scheduler.callsOf("list")[0]?.request).toMatchObject({ limit: 1, includeTerminal: true, parentId: "p1", cursor: "abc" });
    const d = await api(h.url, "GET", "/v1/sessions", { token: TOKENS.bob });
    expect(h.scheduler.callsOf("list")[1]?.request).toMatchObject({ limit: 50, includeTerminal: false });
    expect(d.json.sessions.every((s: { workspaceId: string }) => s.workspaceId === WS1)).toBe(true);
  });

  it("clamps a limit above 500 to 500 (not an error)", async () => {
    for (const q of ["limit=501", "limit=100000", "limit=999999999999999"]) {
      expect((await api(h.url, "GET", `/v1/sessions?${q}`, { token: TOKENS.bob })).status).toBe(200);
      expect((await api(h.url, "GET", `/v1/runners?${q}`, { token: TOKENS.bob })).status).toBe(200);
      expect((await api(h.url, "GET", `/v1/events?${q}`, { token: TOKENS.bob })).status).toBe(200);
    }
    expect(h.scheduler.callsOf("list").map((c) => (c.request as { limit: number }).limit)).toEqual([500, 500, 500]);
    expect(h.scheduler.callsOf("listRunners").map((c) => (c.request as { limit: number }).limit)).toEqual([500, 500, 500]);
  });

  for (const q of ["limit=0", "limit=-1", "limit=", "limit=1e3", "limit=9999999999999999", "limit=abc", "limit=1.5", "includeTerminal=yes", "parentId=a.b", "other=1", "limit=1&limit=2", "cursor="]) {
    it(`answers invalid for ?${q} and calls nothing`, async () => {
      expectError(await api(h.url, "GET", `/v1/sessions?${q}`, { token: TOKENS.alice }), 400, "invalid");
      expect(h.scheduler.calls).toEqual([]);
    });
  }
});

describe("GET and DELETE /v1/sessions/:id", () => {
  it("gets a session of the workspace; another workspace's is not_found", async () => {
    h.scheduler.put(makeSession({ id: "g1", workspaceId: WS1, creatorId: "alice" }));
    h.scheduler.put(makeSession({ id: "g2", workspaceId: WS2, creatorId: "eve" }));
    const r = await api(h.url, "GET", "/v1/sessions/g1", { token: TOKENS.bob });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ id: "g1", workspaceId: WS1 });
    expectError(await api(h.url, "GET", "/v1/sessions/g2", { token: TOKENS.alice }), 404, "not_found");
    expectError(await api(h.url, "DELETE", "/v1/sessions/g2", { token: TOKENS.admin }), 404, "not_found");
    expectError(await api(h.url, "GET", "/v1/sessions/g2/log", { token: TOKENS.admin }), 404, "not_found");
    expectError(await api(h.url, "GET", "/v1/events?sessionId=g2", { token: TOKENS.admin }), 404, "not_found");
    expect(h.scheduler.callsOf("delete")).toEqual([]);
  });

  it("validates path ids before calling anything", async () => {
    expectError(await api(h.url, "GET", "/v1/sessions/bad%2Eid", { token: TOKENS.alice }), 400, "invalid");
    expectError(await api(h.url, "DELETE", `/v1/sessions/${"x".repeat(65)}`, { token: TOKENS.alice }), 400, "invalid");
    expect(h.scheduler.calls).toEqual([]);
  });

  it("a non-creator member may not delete (forbidden); the creator and an admin may", async () => {
    h.scheduler.put(makeSession({ id: "d1", workspaceId: WS1, creatorId: "alice" }));
    h.scheduler.put(makeSession({ id: "d2", workspaceId: WS1, creatorId: "alice" }));
    expectError(await api(h.url, "DELETE", "/v1/sessions/d1", { token: TOKENS.bob }), 403, "forbidden");
    expect(h.scheduler.callsOf("delete")).toEqual([]);
    const byAdmin = await api(h.url, "DELETE", "/v1/sessions/d1", { token: TOKENS.admin });
    expect(byAdmin.status).toBe(200);
    expect(byAdmin.json).toMatchObject({ id: "d1", state: "destroyed" });
    const byCreator = await api(h.url, "DELETE", "/v1/sessions/d2", { token: TOKENS.alice });
    expect(byCreator.status).toBe(200);
    expect(h.scheduler.callsOf("delete")).toHaveLength(2);
  });

  it("reads the current membership on every decision (a role change applies at once)", async () => {
    h.scheduler.put(makeSession({ id: "m1", workspaceId: WS1, creatorId: "alice" }));
    await seedMember(h.nc, { workspaceId: WS1, actorId: "bob", role: "admin" });
    expect((await api(h.url, "GET", "/v1/sessions/m1", { token: TOKENS.bob })).status).toBe(200);
    await seedMember(h.nc, { workspaceId: WS1, actorId: "bob", role: "member" });
    expectError(await api(h.url, "DELETE", "/v1/sessions/m1", { token: TOKENS.bob }), 403, "forbidden");
  });

  it("a membership removed between two requests of one token denies the second (its early read is a fresh one)", async () => {
    const token = "tok_gone_member_0123456789abcdef";
    await seedToken(h.nc, token, { workspaceId: WS1, actor: { id: "gina", kind: "user" }, createdAt: NOW - 1000 });
    await seedMember(h.nc, { workspaceId: WS1, actorId: "gina", role: "member" });
    h.scheduler.put(makeSession({ id: "g1", workspaceId: WS1, creatorId: "alice" }));
    expect((await api(h.url, "GET", "/v1/sessions/g1", { token })).status).toBe(200);
    await (await new Kvm(h.nc).open(Buckets.members)).delete(memberKey(WS1, "gina"));
    const denied = await api(h.url, "GET", "/v1/sessions/g1", { token });
    // No longer a member: the session is not_found to it, exactly like one that does not exist.
    expectError(denied, 404, "not_found");
    expect(denied.json).toEqual((await api(h.url, "GET", "/v1/sessions/g_none", { token })).json);
    expectError(await api(h.url, "GET", "/v1/sessions", { token }), 403, "forbidden");
  });

  it("a session's token: its own session is visible, another existing one is the 404 of a missing one", async () => {
    h.scheduler.put(makeSession({ id: SVC_SESSION, workspaceId: WS1, creatorId: "alice" }));
    h.scheduler.put(makeSession({ id: "sibling1", workspaceId: WS1, creatorId: "alice" }));
    expect((await api(h.url, "GET", `/v1/sessions/${SVC_SESSION}`, { token: TOKENS.svc })).status).toBe(200);
    expectError(await api(h.url, "DELETE", `/v1/sessions/${SVC_SESSION}`, { token: TOKENS.svc }), 403, "forbidden");
    const other = await api(h.url, "GET", "/v1/sessions/sibling1", { token: TOKENS.svc });
    expectError(other, 404, "not_found");
    expect(other.json).toEqual((await api(h.url, "GET", "/v1/sessions/sibling_none", { token: TOKENS.svc })).json);
    expectError(await api(h.url, "DELETE", "/v1/sessions/sibling1", { token: TOKENS.svc }), 404, "not_found");
  });

  it("a token that now names another principal is authorized against that principal's membership, not the one it named before", async () => {
    const token = "tok_repointed_0123456789abcdef";
    await seedToken(h.nc, token, { workspaceId: WS1, actor: { id: "carol", kind: "user" }, createdAt: NOW - 1000 });
    await seedMember(h.nc, { workspaceId: WS1, actorId: "carol", role: "admin" });
    await seedMember(h.nc, { workspaceId: WS1, actorId: "dave", role: "member" });
    h.scheduler.put(makeSession({ id: "p1", workspaceId: WS1, creatorId: "alice" }));
    h.scheduler.put(makeSession({ id: "p2", workspaceId: WS1, creatorId: "alice" }));
    // As carol (an admin) the token may delete another member's session.
    expect((await api(h.url, "DELETE", "/v1/sessions/p1", { token })).status).toBe(200);
    // The same token hash now stands for dave, a plain member: carol's admin role must not carry over.
    await seedToken(h.nc, token, { workspaceId: WS1, actor: { id: "dave", kind: "user" }, createdAt: NOW - 1000 });
    expectError(await api(h.url, "DELETE", "/v1/sessions/p2", { token }), 403, "forbidden");
    expect(h.scheduler.callsOf("delete")).toHaveLength(1);
  });
});

describe("other routes", () => {
  it("lists runners", async () => {
    const r = await api(h.url, "GET", "/v1/runners?limit=10", { token: TOKENS.alice });
    expect(r.status).toBe(200);
    expect(r.json.runners[0]).toMatchObject({ id: "r1" });
    expect(r.json.nextCursor).toBeUndefined();
    expectError(await api(h.url, "GET", "/v1/runners?limit=-1", { token: TOKENS.alice }), 400, "invalid");
  });

  it("unknown routes are not_found, a known path with a wrong method is 405 invalid", async () => {
    expectError(await api(h.url, "GET", "/v1/nope", { token: TOKENS.alice }), 404, "not_found");
    const r = await api(h.url, "PUT", "/v1/sessions", { token: TOKENS.alice, body: "{}" });
    expectError(r, 405, "invalid");
    expect(r.headers.get("allow")).toContain("POST");
  });

  it("serves /healthz and /readyz on the API port", async () => {
    expect((await api(h.url, "GET", "/healthz")).json).toEqual({ status: "ok" });
    expect((await api(h.url, "GET", "/readyz")).json).toEqual({ status: "ready" });
  });

  it("answers unavailable (503) when no scheduler answers", async () => {
    h.scheduler.stop();
    try {
      expectError(await api(h.url, "GET", "/v1/sessions", { token: TOKENS.alice }), 503, "unavailable");
    } finally {
      h.scheduler.start();
    }
  });
});

describe("GET /v1/sessions/:id/log", () => {
  it("answers the app's bytes after since, dropping older-generation chunks", async () => {
    h.scheduler.put(makeSession({ id: "log1", workspaceId: WS1, creatorId: "alice", placementGeneration: 2 }));
    await publishChunk(h.nc, "log1", "main", "old", { placementGeneration: 1 });
    const s1 = await publishChunk(h.nc, "log1", "main", "one ", { placementGeneration: 2 });
    const s2 = await publishChunk(h.nc, "log1", "main", "two", { placementGeneration: 2 });
    await publishChunk(h.nc, "other", "main", "not mine", { placementGeneration: 2 });
    const r = await api(h.url, "GET", "/v1/sessions/log1/log", { token: TOKENS.bob });
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toBe("application/octet-stream");
    expect(r.text).toBe("one two");
    expect(r.headers.get(LOG_CURSOR_HEADER)).toBe(String(s2));
    const after = await api(h.url, "GET", `/v1/sessions/log1/log?since=${s1}&app=main`, { token: TOKENS.bob });
    expect(after.text).toBe("two");
    expectError(await api(h.url, "GET", "/v1/sessions/log1/log?app=nope", { token: TOKENS.bob }), 404, "not_found");
    expectError(await api(h.url, "GET", "/v1/sessions/log1/log?since=x", { token: TOKENS.bob }), 400, "invalid");
  });

  it("needs ?app when the session runs several apps", async () => {
    h.scheduler.put(
      makeSession({ id: "log2", workspaceId: WS1, creatorId: "alice", spec: { apps: [{ name: "a", cmd: ["x"] }, { name: "b", cmd: ["y"] }] } }),
    );
    expectError(await api(h.url, "GET", "/v1/sessions/log2/log", { token: TOKENS.bob }), 400, "invalid");
    expect((await api(h.url, "GET", "/v1/sessions/log2/log?app=b", { token: TOKENS.bob })).status).toBe(200);
  });
});

describe("GET /v1/events", () => {
  const event = (id: string, ws: string, sessionId: string) => makeAuditEvent({ id, workspaceId: ws, sessionId });

  it("pages a workspace's events and one session's, skipping malformed ones", async () => {
    const js = jetstream(h.nc);
    h.scheduler.put(makeSession({ id: "ev1", workspaceId: WS1, creatorId: "alice" }));
    await js.publish(Subjects.audit(WS1, "session", "ev1"), JSON.stringify(event("e1", WS1, "ev1")));
    await js.publish(Subjects.audit(WS2, "session", "x"), JSON.stringify(event("e2", WS2, "x")));
    await js.publish(Subjects.audit(WS1, "session", "ev2"), JSON.stringify(event("e3", WS1, "ev2")));
    await js.publish(Subjects.audit(WS1, "session", "ev1"), "not json");
    await js.publish(Subjects.audit(WS1, "session", "ev1"), JSON.stringify(event("e4", WS1, "ev1")));

    const all = await api(h.url, "GET", "/v1/events", { token: TOKENS.bob });
    expect(all.status).toBe(200);
    expect(all.json.events.map((e: AuditEvent) => e.id)).toEqual(["e1", "e3", "e4"]);
    expect(all.json.nextCursor).toBeUndefined();

    const p1 = await api(h.url, "GET", "/v1/events?limit=2", { token: TOKENS.bob });
    expect(p1.json.events.map((e: AuditEvent) => e.id)).toEqual(["e1", "e3"]);
    expect(p1.json.nextCursor).toMatch(/^\d+$/);
    const p2 = await api(h.url, "GET", `/v1/events?limit=2&since=${p1.json.nextCursor}`, { token: TOKENS.bob });
    expect(p2.json.events.map((e: AuditEvent) => e.id)).toEqual(["e4"]);
    expect(p2.json.nextCursor).toBeUndefined();

    const one = await api(h.url, "GET", "/v1/events?sessionId=ev1", { token: TOKENS.bob });
    expect(one.json.events.map((e: AuditEvent) => e.id)).toEqual(["e1", "e4"]);

    const info = await (await import("@nats-io/jetstream")).jetstreamManager(h.nc).then((m) => m.streams.info(Streams.audit));
    expect(info.state.messages).toBe(5);
  });

  it("a page past the end (or of an empty subject) is an empty list, not an error", async () => {
    for (const q of ["since=999999", "sessionId=nothing-here"]) {
      h.scheduler.put(makeSession({ id: "nothing-here", workspaceId: WS1, creatorId: "alice" }));
      const r = await api(h.url, "GET", `/v1/events?${q}`, { token: TOKENS.bob });
      expect(r.status).toBe(200);
      expect(r.json).toEqual({ events: [] });
    }
  });

  it("validates the query", async () => {
    for (const q of ["limit=0", "limit=x", "since=-1", "sessionId=a.b", "x=1"]) {
      expectError(await api(h.url, "GET", `/v1/events?${q}`, { token: TOKENS.bob }), 400, "invalid");
    }
    expect(h.scheduler.calls).toEqual([]);
  });
});
