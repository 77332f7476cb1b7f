/**
 * A session route's session read begun beside its authentication
 * (GatewayContext.readEarly, decision 0068): taken only when the token still
 * names the scope it was read in, never a second read for one request.
 */
import { describe, expect, it } from "vitest";
import { seedMember, seedToken } from "../auth/auth.ts";
import { api, expectError, makeSession, TOKENS, useHarness, WS1, WS2 } from "../testing/testkit.ts";

const h = useHarness();

describe("a session's record read beside the request's authentication", () => {
  it("answers as a read after it would, with one read of the session per request", async () => {
    h.scheduler.put(makeSession({ id: "early1", workspaceId: WS1, creatorId: "alice" }));
    for (let i = 0; i < 3; i++) {
      const before = h.scheduler.callsOf("get").length;
      const got = await api(h.url, "GET", "/v1/sessions/early1", { token: TOKENS.alice });
      expect(got.status).toBe(200);
      expect(got.json).toMatchObject({ id: "early1", workspaceId: WS1 });
      expect(h.scheduler.callsOf("get").length - before).toBe(1);
    }
    // Another workspace's session under the same id stays not_found for this token, early or not.
    h.scheduler.put(makeSession({ id: "early2", workspaceId: WS2, creatorId: "eve" }));
    expectError(await api(h.url, "GET", "/v1/sessions/early2", { token: TOKENS.alice }), 404, "not_found");
  });

  it("is not taken once the token names another workspace: the record is read again in the new scope", async () => {
    const token = "tok_early_mover_0123456789ab";
    h.scheduler.put(makeSession({ id: "early3", workspaceId: WS1, creatorId: "mover" }));
    await seedToken(h.nc, token, { workspaceId: WS1, actor: { id: "mover", kind: "user" }, createdAt: 1 });
    await seedMember(h.nc, { workspaceId: WS1, actorId: "mover", role: "member" });
    expect((await api(h.url, "GET", "/v1/sessions/early3", { token })).status).toBe(200);
    // The same token now names WS2: its early read (in WS1, the hint) would find early3; the answer must not.
    await seedToken(h.nc, token, { workspaceId: WS2, actor: { id: "mover", kind: "user" }, createdAt: 2 });
    await seedMember(h.nc, { workspaceId: WS2, actorId: "mover", role: "member" });
    const before = h.scheduler.callsOf("get");
    expectError(await api(h.url, "GET", "/v1/sessions/early3", { token }), 404, "not_found");
    const reads = h.scheduler.callsOf("get").slice(before.length);
    expect(reads.map((c) => (c.request as { workspaceId: string }).workspaceId).sort()).toEqual([WS1, WS2]);
  });

  it("a token that stopped authenticating (expired) sets off no early read: refused with no session read at all", async () => {
    const token = "tok_early_expiring_0123456789";
    h.scheduler.put(makeSession({ id: "early4", workspaceId: WS1, creatorId: "alice" }));
    await seedToken(h.nc, token, { workspaceId: WS1, actor: { id: "alice", kind: "user" }, createdAt: 1 });
    expect((await api(h.url, "GET", "/v1/sessions/early4", { token })).status).toBe(200);
    await seedToken(h.nc, token, { workspaceId: WS1, actor: { id: "alice", kind: "user" }, createdAt: 1, expiresAt: 2 });
    // The first refusal may still have read early (the hint was there); the next has nothing to read with.
    expect((await api(h.url, "GET", "/v1/sessions/early4", { token })).status).toBe(401);
    const before = h.scheduler.callsOf("get").length;
    expect((await api(h.url, "GET", "/v1/sessions/early4", { token })).status).toBe(401);
    expect(h.scheduler.callsOf("get").length).toBe(before);
  });
});
