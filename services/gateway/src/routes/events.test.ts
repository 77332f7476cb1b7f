import { describe, expect, it } from "vitest";
import { jetstream } from "@nats-io/jetstream";
import { Subjects, type AuditEntry, type AuditEvent } from "@paddock/contracts";
import { followNdjson, leaveWhileHeld, type Follow } from "../testing/ndjson-follow.ts";
import { makeAuditEvent } from "@paddock/testing";
import { NDJSON } from "@paddock/contracts";
import { api, expectError, makeSession, useHarness, TOKENS, WS1, WS2 } from "../testing/testkit.ts";

const h = useHarness();

const event = (id: string, ws: string, sessionId: string) => makeAuditEvent({ id, workspaceId: ws, sessionId });

/** An open follow stream: events as they arrive, with a way to wait for n of them. */
async function follow(query: string, token: string): Promise<Follow<AuditEntry> & { events: AuditEntry[] }> {
  const f = await followNdjson<AuditEntry>(h.url, `/v1/events?${query}`, token);
  return { ...f, events: f.lines };
}

describe("GET /v1/events?follow=true", () => {
  it("streams the backlog after since, then live events, as NDJSON; only the caller's workspace or session", async () => {
    const js = jetstream(h.nc);
    h.scheduler.put(makeSession({ id: "fo1", workspaceId: WS1, creatorId: "alice" }));
    const first = await js.publish(Subjects.audit(WS1, "session", "fo1"), JSON.stringify(event("f1", WS1, "fo1")));
    await js.publish(Subjects.audit(WS1, "session", "fo1"), JSON.stringify(event("f2", WS1, "fo1")));

    const all = await follow(`follow=true&since=${String(first.seq)}`, TOKENS.bob);
    const one = await follow("follow=true&sessionId=fo1", TOKENS.bob);
    expect(all.res.statusCode).toBe(200);
    expect(all.res.headers["content-type"]).toBe(NDJSON);
    await all.until(1);
    await one.until(2);
    expect(all.events.map((e) => e.id)).toEqual(["f2"]);

    // Live: another workspace's, a malformed one, another session's, then this session's.
    await js.publish(Subjects.audit(WS2, "session", "x"), JSON.stringify(event("f3", WS2, "x")));
    await js.publish(Subjects.audit(WS1, "session", "fo1"), "not json");
    await js.publish(Subjects.audit(WS1, "session", "fo2"), JSON.stringify(event("f4", WS1, "fo2")));
    await js.publish(Subjects.audit(WS1, "session", "fo1"), JSON.stringify(event("f5", WS1, "fo1")));
    await all.until(3);
    await one.until(3);
    expect(all.events.map((e) => e.id)).toEqual(["f2", "f4", "f5"]);
    expect(one.events.map((e) => e.id)).toEqual(["f1", "f2", "f5"]);

    // A disconnect ends the handler (its ordered consumer is closed with it): the request is counted once it returns.
    const served = async () =>
      (await h.metrics.httpRequests.get()).values.find((v) => v.labels.route === "GET /v1/events" && v.labels.status === "200")?.value ?? 0;
    const before = await served();
    all.close();
    one.close();
    for (let i = 0; i < 10_000 && (await served()) < before + 2; i++) await new Promise((r) => setImmediate(r));
    expect(await served()).toBe(before + 2);
  });

  it("refuses bad input with typed errors before streaming", async () => {
    for (const q of ["follow=yes", "follow=1", "follow=", "follow=true&follow=true", "follow=true&limit=5", "follow=true&since=-1", "follow=true&sessionId=a.b", "follow=true&x=1", "since=now", "follow=true&since=later", "follow=true&since=now&startTime=1", "since=3&startTime=1", "startTime=yesterday", "startTime=-1", "follow=true&startTime="]) {
      expectError(await api(h.url, "GET", `/v1/events?${q}`, { token: TOKENS.bob }), 400, "invalid");
    }
    h.scheduler.put(makeSession({ id: "fo-other", workspaceId: WS2, creatorId: "eve" }));
    expectError(await api(h.url, "GET", "/v1/events?follow=true&sessionId=fo-other", { token: TOKENS.bob }), 404, "not_found");
    expectError(await api(h.url, "GET", "/v1/events?follow=true", {}), 401, "unauthenticated");
    expectError(await api(h.url, "GET", "/v1/events?follow=true", { token: TOKENS.outsider }), 403, "forbidden");
  });

  it("a session whose record is gone (expired, evicted) keeps its events listable by sessionId; a non-member still gets not_found", async () => {
    const js = jetstream(h.nc);
    // No record for "gone1": the scheduler answers not_found, as for an expired one.
    await js.publish(Subjects.audit(WS1, "session", "gone1"), JSON.stringify(event("g1", WS1, "gone1")));
    await js.publish(Subjects.audit(WS1, "session", "gone1"), JSON.stringify({ ...event("g2", WS1, "gone1"), action: "expire" }));
    const listed = await api(h.url, "GET", "/v1/events?sessionId=gone1", { token: TOKENS.bob });
    expect(listed.status).toBe(200);
    expect((listed.json as { events: AuditEvent[] }).events.map((e) => [e.id, e.action])).toEqual([
      ["g1", "create"],
      ["g2", "expire"],
    ]);
    const followed = await follow("follow=true&sessionId=gone1", TOKENS.bob);
    await followed.until(2);
    followed.close();
    expect(followed.events.map((e) => e.id)).toEqual(["g1", "g2"]);
    // Whoever may not read the workspace's events learns nothing about it: the same not_found as any absent session.
    expectError(await api(h.url, "GET", "/v1/events?sessionId=gone1", { token: TOKENS.outsider }), 404, "not_found");
    expectError(await api(h.url, "GET", "/v1/events?sessionId=never1", { token: TOKENS.outsider }), 404, "not_found");
    // Another workspace's member looks only in her own workspace, where it never was.
    expectError(await api(h.url, "GET", "/v1/events?sessionId=gone1", { token: TOKENS.eve }), 404, "not_found");
    expectError(await api(h.url, "GET", "/v1/events?sessionId=never1", { token: TOKENS.bob }), 404, "not_found");
  });

  it("every line carries its stream sequence: a follow resumed after the last one seen loses and repeats nothing", async () => {
    const js = jetstream(h.nc);
    h.scheduler.put(makeSession({ id: "fo-seq", workspaceId: WS1, creatorId: "alice" }));
    const subject = Subjects.audit(WS1, "session", "fo-seq");
    const acks = [await js.publish(subject, JSON.stringify(event("q1", WS1, "fo-seq"))), await js.publish(subject, JSON.stringify(event("q2", WS1, "fo-seq")))];
    const first = await follow("follow=true&sessionId=fo-seq", TOKENS.bob);
    await first.until(2);
    expect(first.events.map((e) => [e.id, e.seq])).toEqual(acks.map((a, i) => [`q${String(i + 1)}`, a.seq]));
    first.close();
    // Published while no one follows; the resumed follow starts right after the last line it saw.
    await js.publish(subject, JSON.stringify(event("q3", WS1, "fo-seq")));
    const resumed = await follow(`follow=true&sessionId=fo-seq&since=${String(first.events[1]?.seq)}`, TOKENS.bob);
    await js.publish(subject, JSON.stringify(event("q4", WS1, "fo-seq")));
    await resumed.until(2);
    resumed.close();
    expect(resumed.events.map((e) => e.id)).toEqual(["q3", "q4"]);
    // The paged list carries the same sequences.
    const page = await api(h.url, "GET", "/v1/events?sessionId=fo-seq", { token: TOKENS.bob });
    expect((page.json as { events: AuditEntry[] }).events.map((e) => e.seq)).toEqual([...acks.map((a) => a.seq), ...resumed.events.map((e) => e.seq)]);
  });

  it("a client gone before the follow started leaves nothing behind: the handler ends", async () => {
    h.scheduler.put(makeSession({ id: "fo-gone", workspaceId: WS1, creatorId: "alice" }));
    const served = async () => (await h.metrics.httpRequests.get()).values.find((v) => v.labels.route === "GET /v1/events" && v.labels.status === "200")?.value ?? 0;
    const before = await served();
    await leaveWhileHeld(h, "get", "/v1/events?follow=true&sessionId=fo-gone", TOKENS.bob);
    for (let i = 0; i < 10_000 && (await served()) === before; i++) await new Promise((r) => setImmediate(r));
    expect(await served()).toBe(before + 1);
  });

  it("since=now follows only what happens after the follow opened", async () => {
    const js = jetstream(h.nc);
    h.scheduler.put(makeSession({ id: "fo-now", workspaceId: WS1, creatorId: "alice" }));
    const subject = Subjects.audit(WS1, "session", "fo-now");
    await js.publish(subject, JSON.stringify(event("n1", WS1, "fo-now")));
    const live = await follow("follow=true&sessionId=fo-now&since=now", TOKENS.bob);
    expect(live.res.statusCode).toBe(200);
    await js.publish(subject, JSON.stringify(event("n2", WS1, "fo-now")));
    await live.until(1);
    live.close();
    expect(live.events.map((e) => e.id)).toEqual(["n2"]);
  });

  it("startTime starts a page or a follow at the first event stored at or after it", async () => {
    const js = jetstream(h.nc);
    const jsm = await js.jetstreamManager();
    h.scheduler.put(makeSession({ id: "fo-time", workspaceId: WS1, creatorId: "alice" }));
    const subject = Subjects.audit(WS1, "session", "fo-time");
    const old = await js.publish(subject, JSON.stringify(event("t1", WS1, "fo-time")));
    const storedAt = (await jsm.streams.getMessage(old.stream, { seq: old.seq }))?.time.getTime() ?? 0;
    expect(storedAt).toBeGreaterThan(0);
    // The next event is stored in a later millisecond than the first (the server shares this machine's clock).
    while (Date.now() <= storedAt + 1) await new Promise((r) => setTimeout(r, 1));
    await js.publish(subject, JSON.stringify(event("t2", WS1, "fo-time")));
    const startTime = storedAt + 1;
    const page = await api(h.url, "GET", `/v1/events?sessionId=fo-time&startTime=${String(startTime)}`, { token: TOKENS.bob });
    expect((page.json as { events: AuditEntry[] }).events.map((e) => e.id)).toEqual(["t2"]);
    const followed = await follow(`follow=true&sessionId=fo-time&startTime=${String(startTime)}`, TOKENS.bob);
    await followed.until(1);
    followed.close();
    expect(followed.events.map((e) => e.id)).toEqual(["t2"]);
    const later = await api(h.url, "GET", `/v1/events?sessionId=fo-time&startTime=${String(Date.now() + 60_000)}`, { token: TOKENS.bob });
    expect(later.json).toEqual({ events: [] });
  });

  it("follow=false is the paged list", async () => {
    const r = await api(h.url, "GET", "/v1/events?follow=false&limit=1", { token: TOKENS.bob });
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toBe("application/json");
  });
});
