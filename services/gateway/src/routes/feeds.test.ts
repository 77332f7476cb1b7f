/**
 * The record feeds of the list routes: GET /v1/runners?follow=true and
 * GET /v1/tokens?follow=true, against a real nats-server (the changes come
 * from KV watches, as the scheduler and other gateways write them).
 */
import { Kvm } from "@nats-io/kv";
import { describe, expect, it } from "vitest";
import { Buckets, runnerKey, type RunnerFeedLine, type TokenFeedLine } from "@paddock/contracts";
import { api, expectError, makeRunner, RUNNER, TOKENS, useHarness } from "../testing/testkit.ts";
import { followNdjson, leaveWhileHeld } from "../testing/ndjson-follow.ts";

const h = useHarness();

const isSynced = (l: object) => "synced" in l;

describe("GET /v1/runners?follow=true", () => {
  it("sends every runner, synced, then each record change, lease renewal and removal", async () => {
    const feed = await followNdjson<RunnerFeedLine>(h.url, "/v1/runners?follow=true", TOKENS.alice);
    expect(feed.res.statusCode).toBe(200);
    await feed.waitFor(isSynced);
    const synced = feed.lines.findIndex(isSynced);
    expect(feed.lines.slice(0, synced)).toEqual([...h.scheduler.runners.values()].map((runner) => ({ runner })));

    // The scheduler writes a new runner's record; the runner renews its lease; the record changes; it is removed.
    const runners = await new Kvm(h.nc).open(Buckets.runners);
    const leases = await new Kvm(h.nc).open(Buckets.runnerLeases);
    const fresh = makeRunner({ id: "feed1", poolId: "gpu", lastSeenAt: 1_000 });
    const key = runnerKey("gpu", "feed1");
    await runners.put(key, JSON.stringify(fresh));
    expect(await feed.waitFor((l) => "runner" in l, synced)).toEqual({ runner: fresh });
    const lease = await leases.put(key, JSON.stringify({ runnerId: "feed1", poolId: "gpu", generation: 1, renewedAt: 2_000 }));
    const seen = await feed.waitFor((l) => "seen" in l);
    const storedAt = (await leases.get(key))?.created.getTime();
    expect(lease).toBeGreaterThan(0);
    expect(seen).toEqual({ seen: { poolId: "gpu", id: "feed1", at: storedAt } });
    // A record written later keeps the lease's lastSeenAt (renewals are not record writes).
    await runners.put(key, JSON.stringify({ ...fresh, state: "cordoned" }));
    const cordoned = await feed.waitFor((l) => "runner" in l && l.runner.state === "cordoned");
    expect(cordoned).toEqual({ runner: { ...fresh, state: "cordoned", lastSeenAt: storedAt } });
    await runners.delete(key);
    expect(await feed.waitFor((l) => "removed" in l)).toEqual({ removed: { poolId: "gpu", id: "feed1" } });
    // Lines that break the contract (a malformed record) are skipped, not sent.
    await runners.put(runnerKey("gpu", "bad"), "{not json");
    await runners.put(key, JSON.stringify(fresh));
    const after = await feed.waitFor((l) => "runner" in l && l.runner.id === "feed1" && l.runner.state === "active", synced + 3);
    expect(after).toMatchObject({ runner: { id: "feed1" } });
    expect(feed.lines.filter((l) => "runner" in l && l.runner.id === "bad")).toEqual([]);
    feed.close();
    await runners.purge(key);
    await runners.purge(runnerKey("gpu", "bad"));
  });

  it("is cut when the token that opened it is revoked", async () => {
    const minted = await api(h.url, "POST", "/v1/tokens", { token: TOKENS.bob, body: JSON.stringify({ label: "feed" }) });
    expect(minted.status).toBe(201);
    const { token, id } = minted.json as { token: string; id: string };
    const feed = await followNdjson<RunnerFeedLine>(h.url, "/v1/runners?follow=true", token);
    await feed.waitFor(isSynced);
    expect((await api(h.url, "DELETE", `/v1/tokens/${id}`, { token: TOKENS.bob })).status).toBe(200);
    await expect(feed.until(Number.MAX_SAFE_INTEGER)).rejects.toThrow(/stream ended/);
    expect(feed.res.complete).toBe(false);
  });

  it("a client gone while the snapshot is read leaves nothing behind: the handler ends", async () => {
    const served = async () => (await h.metrics.httpRequests.get()).values.find((v) => v.labels.route === "GET /v1/runners" && v.labels.status === "200")?.value ?? 0;
    const before = await served();
    await leaveWhileHeld(h, "listRunners", "/v1/runners?follow=true", TOKENS.alice);
    for (let i = 0; i < 10_000 && (await served()) === before; i++) await new Promise((r) => setImmediate(r));
    expect(await served()).toBe(before + 1);
  });

  it("refuses bad input and callers without access before streaming", async () => {
    for (const q of ["follow=yes", "follow=true&limit=5", "follow=true&cursor=abc", "follow=true&x=1", "follow=true&follow=true"]) {
      expectError(await api(h.url, "GET", `/v1/runners?${q}`, { token: TOKENS.alice }), 400, "invalid");
    }
    expectError(await api(h.url, "GET", "/v1/runners?follow=true", {}), 401, "unauthenticated");
    expectError(await api(h.url, "GET", "/v1/runners?follow=true", { token: TOKENS.outsider }), 403, "forbidden");
    expectError(await api(h.url, "GET", "/v1/runners?follow=true", { token: TOKENS.svc }), 403, "forbidden");
    // The paged read is unchanged.
    expect((await api(h.url, "GET", "/v1/runners?follow=false&limit=1", { token: TOKENS.alice })).json).toMatchObject({ runners: [{ id: RUNNER.id }] });
  });
});

describe("GET /v1/tokens?follow=true", () => {
  it("sends the caller's own tokens, synced, then each one minted and revoked; never another actor's, never a value", async () => {
    const before = await api(h.url, "POST", "/v1/tokens", { token: TOKENS.alice, body: JSON.stringify({ label: "before" }) });
    const feed = await followNdjson<TokenFeedLine>(h.url, "/v1/tokens?follow=true", TOKENS.alice);
    await feed.waitFor(isSynced);
    const listed = (await api(h.url, "GET", "/v1/tokens", { token: TOKENS.alice })).json as { tokens: unknown[] };
    const synced = feed.lines.findIndex(isSynced);
    expect(feed.lines.slice(0, synced)).toEqual(listed.tokens.map((token) => ({ token })));
    expect(feed.lines.slice(0, synced)).toContainEqual({ token: expect.objectContaining({ id: (before.json as { id: string }).id }) });

    await api(h.url, "POST", "/v1/tokens", { token: TOKENS.bob, body: JSON.stringify({ label: "bob's" }) });
    const minted = (await api(h.url, "POST", "/v1/tokens", { token: TOKENS.alice, body: JSON.stringify({ label: "after" }) })).json as { id: string; token: string };
    const line = await feed.waitFor((l) => "token" in l, synced);
    const { token: _value, ...info } = minted;
    expect(line).toEqual({ token: info });
    expect(JSON.stringify(feed.lines)).not.toContain(minted.token);
    expect((await api(h.url, "DELETE", `/v1/tokens/${minted.id}`, { token: TOKENS.alice })).status).toBe(200);
    expect(await feed.waitFor((l) => "removed" in l)).toEqual({ removed: { id: minted.id } });
    // Bob's token was never a line of Alice's feed.
    expect(feed.lines.filter((l) => "token" in l && l.token.label === "bob's")).toEqual([]);
    feed.close();
  });

  it("refuses bad input and callers without access before streaming", async () => {
    for (const q of ["follow=yes", "follow=true&limit=5", "x=1", "follow=true&follow=false"]) {
      expectError(await api(h.url, "GET", `/v1/tokens?${q}`, { token: TOKENS.alice }), 400, "invalid");
    }
    expectError(await api(h.url, "GET", "/v1/tokens?follow=true", {}), 401, "unauthenticated");
    expectError(await api(h.url, "GET", "/v1/tokens?follow=true", { token: TOKENS.outsider }), 403, "forbidden");
  });
});
