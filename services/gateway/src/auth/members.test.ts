/**
 * Workspaces and members through the API against a real NATS: a fleet
 * operator creates a workspace and its first admin (and a token for them),
 * that admin manages it with a token of it, the last admin is kept, nobody
 * else learns another workspace exists, bad input changes nothing, and a
 * removed member's open stream is cut at once.
 */
import { describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { Buckets, type CreatedToken, type Member } from "@paddock/contracts";
import { followNdjson } from "../testing/ndjson-follow.ts";
import { api, expectError, TOKENS, useHarness, WS1, WS2 } from "../testing/testkit.ts";

const h = useHarness();

const json = (v: unknown) => ({ body: JSON.stringify(v), headers: { "content-type": "application/json" } });
const call = (method: string, path: string, token: string, body?: unknown) => api(h.url, method, path, { token, ...(body === undefined ? {} : json(body)) });
const memberships = async () => {
  const kv = await new Kvm(h.nc).open(Buckets.members);
  const keys: string[] = [];
  for await (const k of await kv.keys()) if ((await kv.get(k))?.operation === "PUT") keys.push(k);
  return keys.sort();
};

describe("workspaces and members", () => {
  it("a fleet operator creates a workspace and its first admin, who then manages it with a token of it", async () => {
    const made = await call("POST", "/v1/workspaces", TOKENS.admin, { id: "ws-new", name: "New team" });
    expect([made.status, made.json]).toEqual([201, { id: "ws-new", name: "New team", createdAt: expect.any(Number), createdBy: "boss" }]);
    expectError(await call("POST", "/v1/workspaces", TOKENS.admin, { id: "ws-new" }), 409, "conflict");
    // A workspace that exists by its members only is taken too.
    expectError(await call("POST", "/v1/workspaces", TOKENS.admin, { id: WS2 }), 409, "conflict");

    expect((await call("GET", "/v1/workspaces/ws-new/members", TOKENS.admin)).json).toEqual({ members: [] });
    expect((await call("PUT", "/v1/workspaces/ws-new/members/carol", TOKENS.admin, { role: "admin" })).json).toEqual({ workspaceId: "ws-new", actorId: "carol", role: "admin" });
    const carol = (await call("POST", "/v1/workspaces/ws-new/members/carol/tokens", TOKENS.admin, { label: "carol's laptop" })).json as CreatedToken;
    expect(carol).toMatchObject({ workspaceId: "ws-new", actor: { id: "carol", kind: "user" }, label: "carol's laptop" });

    // Carol, with her token of ws-new: adds a member, mints their token, lists.
    expect((await call("PUT", "/v1/workspaces/ws-new/members/dave", carol.token, { role: "member" })).status).toBe(200);
    const dave = (await call("POST", "/v1/workspaces/ws-new/members/dave/tokens", carol.token)).json as CreatedToken;
    expect(dave.actor.id).toBe("dave");
    const listed = (await call("GET", "/v1/workspaces/ws-new/members", carol.token)).json as { members: Member[] };
    expect(listed.members.map((m) => [m.actorId, m.role])).toEqual([
      ["carol", "admin"],
      ["dave", "member"],
    ]);
    // Dave is a member, not an admin; a member of another workspace does not learn ws-new exists.
    expectError(await call("GET", "/v1/workspaces/ws-new/members", dave.token), 403, "forbidden");
    expectError(await call("PUT", "/v1/workspaces/ws-new/members/dave", dave.token, { role: "admin" }), 403, "forbidden");
    expectError(await call("GET", "/v1/workspaces/ws-new/members", TOKENS.eve), 404, "not_found");
    expectError(await call("GET", `/v1/workspaces/${WS1}/members`, carol.token), 404, "not_found");
    // Dave's token works in ws-new (he may list its sessions) and nowhere else.
    expect((await call("GET", "/v1/sessions", dave.token)).status).toBe(200);
  });

  it("keeps the last admin: not demoted, not removed, until another admin exists", async () => {
    await call("POST", "/v1/workspaces", TOKENS.admin, { id: "ws-last" });
    await call("PUT", "/v1/workspaces/ws-last/members/gus", TOKENS.admin, { role: "admin" });
    expectError(await call("PUT", "/v1/workspaces/ws-last/members/gus", TOKENS.admin, { role: "member" }), 409, "conflict");
    expectError(await call("DELETE", "/v1/workspaces/ws-last/members/gus", TOKENS.admin), 409, "conflict");
    await call("PUT", "/v1/workspaces/ws-last/members/hal", TOKENS.admin, { role: "admin" });
    expect((await call("PUT", "/v1/workspaces/ws-last/members/gus", TOKENS.admin, { role: "member" })).json).toMatchObject({ role: "member" });
    expect((await call("DELETE", "/v1/workspaces/ws-last/members/gus", TOKENS.admin)).json).toEqual({ workspaceId: "ws-last", actorId: "gus", role: "member" });
    expectError(await call("DELETE", "/v1/workspaces/ws-last/members/gus", TOKENS.admin), 404, "not_found");
    expect(await memberships()).toContain("ws-last.hal");
    expect(await memberships()).not.toContain("ws-last.gus");
  });

  it("is for admins and fleet operators only; a session's token, members and outsiders change nothing", async () => {
    const before = await memberships();
    expectError(await call("POST", "/v1/workspaces", TOKENS.alice, { id: "ws-x" }), 403, "forbidden");
    expectError(await call("POST", "/v1/workspaces", TOKENS.eve, { id: "ws-x" }), 403, "forbidden");
    expectError(await call("POST", "/v1/workspaces", TOKENS.svc, { id: "ws-x" }), 403, "forbidden");
    expectError(await call("GET", `/v1/workspaces/${WS1}/members`, TOKENS.alice), 403, "forbidden");
    expectError(await call("PUT", `/v1/workspaces/${WS1}/members/alice`, TOKENS.alice, { role: "admin" }), 403, "forbidden");
    expectError(await call("PUT", `/v1/workspaces/${WS1}/members/mallory`, TOKENS.svc, { role: "admin" }), 403, "forbidden");
    expectError(await call("POST", `/v1/workspaces/${WS1}/members/alice/tokens`, TOKENS.bob), 403, "forbidden");
    expectError(await call("PUT", `/v1/workspaces/${WS2}/members/mallory`, TOKENS.alice, { role: "admin" }), 404, "not_found");
    expectError(await call("GET", "/v1/workspaces/nowhere/members", TOKENS.admin), 404, "not_found");
    expectError(await call("POST", `/v1/workspaces/${WS1}/members/stranger/tokens`, TOKENS.admin), 404, "not_found");
    expect(await memberships()).toEqual(before);
  });

  it("refuses bad input (400) before changing anything", async () => {
    const before = await memberships();
    const bad: Array<[string, string, unknown]> = [
      ["POST", "/v1/workspaces", { id: "bad id" }],
      ["POST", "/v1/workspaces", { id: "ok", extra: 1 }],
      ["POST", "/v1/workspaces", { id: "ok", name: "" }],
      ["PUT", `/v1/workspaces/${WS1}/members/carl`, { role: "owner" }],
      ["PUT", `/v1/workspaces/${WS1}/members/carl`, {}],
      ["PUT", `/v1/workspaces/${WS1}/members/a.b`, { role: "member" }],
      ["PUT", "/v1/workspaces/a.b/members/carl", { role: "member" }],
      ["POST", `/v1/workspaces/${WS1}/members/bob/tokens`, { expiresInMs: 5 }],
      ["POST", `/v1/workspaces/${WS1}/members/bob/tokens`, { label: 7 }],
    ];
    for (const [method, path, body] of bad) expect([method, path, (await call(method, path, TOKENS.admin, body)).status]).toEqual([method, path, 400]);
    expect(await memberships()).toEqual(before);
  });

  it("a removed member's open stream is cut at once, and their token stops authorizing", async () => {
    await call("PUT", `/v1/workspaces/${WS1}/members/fran`, TOKENS.admin, { role: "member" });
    const fran = (await call("POST", `/v1/workspaces/${WS1}/members/fran/tokens`, TOKENS.admin)).json as CreatedToken;
    const stream = await followNdjson(h.url, "/v1/events?follow=true&since=now", fran.token);
    expect(stream.res.statusCode).toBe(200);
    // Cut, not ended: the client sees the response aborted.
    stream.res.on("error", () => undefined);
    const cut = new Promise((resolve) => stream.res.once("close", resolve));
    expect((await call("DELETE", `/v1/workspaces/${WS1}/members/fran`, TOKENS.admin)).status).toBe(200);
    await cut;
    expect(stream.res.complete).toBe(false);
    expectError(await call("GET", "/v1/sessions", fran.token), 403, "forbidden");
  });
});
