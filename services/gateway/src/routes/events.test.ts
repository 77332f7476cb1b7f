import { describe, expect, it } from "vitest";
import { jetstream } from "@nats-io/jetstream";
import { Subjects, type AuditEntry, type AuditEvent } from "@paddock/contracts";
import { followNdjson, leaveWhileHeld, type Follow } from "../testing/ndjson-follow.ts";
import { makeAuditEvent } from "@paddock/testing";
import { NDJSON } from "@paddock/contracts";
import { api, expectError, makeSession, useHarness, TOKENS, WS1, WS2 } from "../testing/testkit.ts";
import { EVENTS_SCAN_MAX } from "./events.ts";

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

describe("GET /v1/events filters", () => {
  const js = () => jetstream(h.nc);
  const put = async (id: string, kind: "session" | "environment" | "runner", resourceId: string, action: AuditEvent["action"], actorId: string, at: number) =>
    js().publish(Subjects.audit(WS1, kind, resourceId), JSON.stringify(makeAuditEvent({ id, workspaceId: WS1, sessionId: resourceId, action, actorId, at, resource: { kind, workspaceId: WS1, id: resourceId, creatorId: "alice" } })));
  const ids = async (query: string) => {
    const r = await api(h.url, "GET", `/v1/events?${query}`, { token: TOKENS.bob });
    expect(r.status, query).toBe(200);
    return (r.json as { events: AuditEntry[] }).events.map((e) => e.id);
  };

  it("by action, actor, resource kind and time range, alone and together, in pages and followed", async () => {
    h.scheduler.put(makeSession({ id: "flt1", workspaceId: WS1, creatorId: "alice" }));
    // Commit times as the recorder stamps them: just before each is stored.
    const base = Date.now();
    const first = await put("flt-e1", "session", "flt1", "create", "alice", base + 1);
    await put("flt-e2", "session", "flt1", "exec", "bob", base + 2);
    await put("flt-e3", "environment", "flt-env", "update", "alice", base + 3);
    await put("flt-e4", "runner", "flt-r", "lose", "system", base + 4);
    await put("flt-e5", "session", "flt2", "exec", "alice", base + 5);
    const since = `since=${String(first.seq - 1)}`;
    expect(await ids(since)).toEqual(["flt-e1", "flt-e2", "flt-e3", "flt-e4", "flt-e5"]);
    expect(await ids(`${since}&action=exec`)).toEqual(["flt-e2", "flt-e5"]);
    expect(await ids(`${since}&action=exec&actorId=alice`)).toEqual(["flt-e5"]);
    expect(await ids(`${since}&resourceKind=environment`)).toEqual(["flt-e3"]);
    expect(await ids(`${since}&resourceKind=runner`)).toEqual(["flt-e4"]);
    expect(await ids(`${since}&resourceKind=session&action=create,exec`)).toEqual(["flt-e1", "flt-e2", "flt-e5"]);
    expect(await ids(`${since}&endTime=${String(base + 2)}`)).toEqual(["flt-e1", "flt-e2"]);
    // Long before these were stored: the read stops at once.
    expect(await ids(`${since}&endTime=${String(base - 120_000)}`)).toEqual([]);
    expect(await ids(`${since}&sessionId=flt1&action=exec`)).toEqual(["flt-e2"]);
    expect(await ids(`${since}&sessionId=flt1&resourceKind=session&actorId=nobody`)).toEqual([]);

    const followed = await follow(`follow=true&${since}&action=update,lose`, TOKENS.bob);
    await followed.until(2);
    await put("flt-e6", "session", "flt1", "create", "alice", base + 6);
    await put("flt-e7", "environment", "flt-env", "update", "bob", base + 7);
    await followed.until(3);
    followed.close();
    expect(followed.events.map((e) => e.id)).toEqual(["flt-e3", "flt-e4", "flt-e7"]);
  });

  it(`a selective filter answers a shorter page with its cursor after ${EVENTS_SCAN_MAX} stored events, and the next page goes on`, async () => {
    const first = await put("scan-0", "environment", "scan-env", "create", "alice", 1);
    for (let i = 0; i < EVENTS_SCAN_MAX; i += 500) await Promise.all(Array.from({ length: 500 }, (_, k) => put(`scan-${String(i + k + 1)}`, "environment", "scan-env", "update", "alice", 1)));
    await put("scan-hit", "environment", "scan-env", "delete", "alice", 1);
    const page = await api(h.url, "GET", `/v1/events?since=${String(first.seq)}&action=delete&resourceKind=environment`, { token: TOKENS.bob });
    const body = page.json as { events: AuditEntry[]; nextCursor?: string };
    expect(body.events).toEqual([]);
    expect(body.nextCursor).toBe(String(first.seq + EVENTS_SCAN_MAX));
    expect(await ids(`since=${body.nextCursor ?? ""}&action=delete&resourceKind=environment`)).toEqual(["scan-hit"]);
  });

  it("refuses bad filters (400) before reading anything", async () => {
    for (const q of ["action=nope", "action=", "action=create,,exec", `action=${Array(17).fill("create").join(",")}`, "resourceKind=token", "resourceKind=", "actorId=a.b", "sessionId=s1&resourceKind=environment", "follow=true&endTime=5", "startTime=10&endTime=5", "endTime=-1", "endTime=soon"]) {
      expectError(await api(h.url, "GET", `/v1/events?${q}`, { token: TOKENS.bob }), 400, "invalid");
    }
  });
});
