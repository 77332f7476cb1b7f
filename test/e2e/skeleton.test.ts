/**
 * The walking skeleton through all four services as separate OS processes on a
 * real nats-server: HTTP create → scheduler placement → runner PTY → TERM →
 * WebSocket attach → exit → dead record → audit events, each exactly once.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { seedMember, seedToken } from "@paddock/gateway/auth";
import { startStack, type Stack } from "@paddock/testing";
import { api, sessionOf, Terminal, waitForAuditEvents } from "./helpers.ts";

let stack: Stack;
let nc: NatsConnection;
const OTHER_TOKEN = "pdk_test_other_workspace_token_0001";
const MEMBER_TOKEN = "pdk_test_plain_member_token_00001";

beforeAll(async () => {
  stack = await startStack();
  nc = await connect({ servers: stack.nats.url });
  await seedToken(nc, OTHER_TOKEN, { workspaceId: "other", actor: { id: "olga", kind: "user" }, createdAt: 1 });
  await seedMember(nc, { workspaceId: "other", actorId: "olga", role: "admin" });
  await seedToken(nc, MEMBER_TOKEN, { workspaceId: "default", actor: { id: "mia", kind: "user" }, createdAt: 1 });
  await seedMember(nc, { workspaceId: "default", actorId: "mia", role: "member" });
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

describe("one session end to end", () => {
  it("runs in a PTY, takes controller input, replays, ends dead with its exit code, and is audited once per fact", async () => {
    const created = await api(stack.url, stack.token, "POST", "/v1/sessions", {
      spec: { cmd: ["sh", "-c", "printf 'ready\\n'; read line; printf 'got:%s\\n' \"$line\"; exit 7"] },
    });
    expect(created.status).toBe(201);
    const session = sessionOf(created);
    expect(session).toMatchObject({ state: "queued", workspaceId: "default", creatorId: "dev" });

    const controller = await Terminal.open(stack.url, stack.token, session.id, "mode=controller&since=all");
    await controller.until((t) => t.output().includes("ready"));
    const hello = controller.textFrames()[0];
    expect(hello).toMatchObject({ type: "hello", sessionId: session.id, app: "main", mode: "controller", controllerGeneration: 1 });

    // A viewer's input is refused; the socket stays open.
    const viewer = await Terminal.open(stack.url, MEMBER_TOKEN, session.id, "mode=viewer&since=all");
    viewer.ws.send(Buffer.from("ignored\n"));
    await viewer.until((t) => t.textFrames().some((f) => f.type === "error" && f.code === "read_only"));

    controller.ws.send(Buffer.from("hello\n"));
    await controller.until((t) => t.textFrames().some((f) => f.type === "exit"));
    expect(controller.output()).toContain("got:hello");
    expect(controller.textFrames().find((f) => f.type === "exit")).toEqual({ type: "exit", app: "main", code: 7 });
    expect(await controller.closed).toBe(1000);
    await viewer.closed;

    // The record ends dead with the exit code (the runner reports after the log is complete).
    const events = await waitForAuditEvents(nc, "default", session.id, (evs) => evs.some((e) => e.action === "exit"));
    const dead = sessionOf(await api(stack.url, stack.token, "GET", `/v1/sessions/${session.id}`));
    expect(dead).toMatchObject({ state: "dead", childExitCode: 7, placementGeneration: 1, runnerId: "runner-1" });

    // Replay: since=all gives every byte; since=<cursor> gives exactly what follows it.
    const replay = await Terminal.open(stack.url, stack.token, session.id, "since=all");
    await replay.closed;
    expect(replay.output()).toBe(controller.output());
    const outputs = replay.frames.filter((f) => f.kind === "output");
    const first = outputs[0];
    if (first?.kind !== "output") throw new Error("no output frames replayed");
    const resumed = await Terminal.open(stack.url, stack.token, session.id, `since=${first.cursor}`);
    await resumed.closed;
    expect(first.text + resumed.output()).toBe(replay.output());

    // Audit: exactly one event per committed fact, in order, through the public API too.
    const listed = await api(stack.url, stack.token, "GET", `/v1/events?sessionId=${session.id}`);
    expect(listed.status).toBe(200);
    const publicEvents = (listed.body as { events: typeof events }).events;
    // attach and start race (the controller may attach before or after the process starts).
    const actions = publicEvents.map((e) => e.action);
    expect([...actions].sort()).toEqual(["attach", "create", "exit", "place", "run.completed", "run.started", "start"]);
    expect(actions[0]).toBe("create");
    expect(actions.indexOf("place")).toBeLessThan(actions.indexOf("start"));
    expect(actions.indexOf("run.started")).toBeLessThan(actions.indexOf("run.completed"));
    expect(actions[actions.length - 1]).toBe("exit");
    expect(publicEvents.find((e) => e.action === "start")?.placementGeneration).toBe(1);
    expect(new Set(publicEvents.map((e) => e.id)).size).toBe(publicEvents.length);
    expect(publicEvents.map((e) => e.id)).toEqual(events.map((e) => e.id));
    for (const e of publicEvents) {
      const fixed = ["action", "actorId", "at", "id", "placementGeneration", "resource", "seq", "usage", "workspaceId"];
      // A run event also names its app generation (`run`); no event carries anything else (`seq` is its place in the stream, the API's cursor).
      expect(Object.keys(e).sort()).toEqual(e.action.startsWith("run.") ? [...fixed, "run"].sort() : fixed);
    }
    // Terminal bytes never reach the audit stream.
    expect(JSON.stringify(publicEvents)).not.toContain("hello");
  });

  it("hides a session from another workspace and lets only the creator or an admin delete", async () => {
    const s = sessionOf(await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sleep", "30"] } }));
    expect((await api(stack.url, OTHER_TOKEN, "GET", `/v1/sessions/${s.id}`)).status).toBe(404);
    expect((await api(stack.url, OTHER_TOKEN, "DELETE", `/v1/sessions/${s.id}`)).status).toBe(404);
    const others = await api(stack.url, OTHER_TOKEN, "GET", "/v1/sessions?includeTerminal=true");
    expect((others.body as { sessions: unknown[] }).sessions).toEqual([]);
    expect((await api(stack.url, MEMBER_TOKEN, "GET", `/v1/sessions/${s.id}`)).status).toBe(200);
    expect((await api(stack.url, MEMBER_TOKEN, "DELETE", `/v1/sessions/${s.id}`)).status).toBe(403);
    const deleted = await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
    expect(deleted.status).toBe(200);
    expect(["canceled", "destroyed"]).toContain(sessionOf(deleted).state);
    // Idempotent.
    const again = await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
    expect(sessionOf(again).state).toBe(sessionOf(deleted).state);
  });
});

describe("bad input through the real stack changes nothing", () => {
  const cases: Array<[string, string, string, { body?: unknown; raw?: string; token?: string | null }, number, string]> = [
    ["invalid JSON", "POST", "/v1/sessions", { raw: "{not json" }, 400, "invalid"],
    ["unknown field", "POST", "/v1/sessions", { body: { spec: { cmd: ["true"] }, extra: 1 } }, 400, "invalid"],
    ["unknown spec field", "POST", "/v1/sessions", { body: { spec: { cmd: ["true"], cpu: 4 } } }, 400, "invalid"],
    ["wrong type", "POST", "/v1/sessions", { body: { spec: { cmd: "true" } } }, 400, "invalid"],
    ["oversize body", "POST", "/v1/sessions", { raw: JSON.stringify({ spec: { cmd: ["x".repeat(2 * 1024 * 1024)] } }) }, 413, "too_large"],
    ["missing token", "POST", "/v1/sessions", { body: { spec: { cmd: ["true"] } }, token: null }, 401, "unauthenticated"],
    ["wrong token", "POST", "/v1/sessions", { body: { spec: { cmd: ["true"] } }, token: "pdk_wrong" }, 401, "unauthenticated"],
    ["bad limit", "GET", "/v1/sessions?limit=abc", {}, 400, "invalid"],
    ["bad cursor", "GET", "/v1/sessions?cursor=%%%", {}, 400, "invalid"],
    ["bad id", "GET", "/v1/sessions/bad.id", {}, 400, "invalid"],
    ["missing token on get", "GET", "/v1/sessions/ses_x", { token: null }, 401, "unauthenticated"],
    ["unknown session", "DELETE", "/v1/sessions/ses_unknown", {}, 404, "not_found"],
    ["bad events limit", "GET", "/v1/events?limit=0", {}, 400, "invalid"],
    ["unknown route", "GET", "/v1/nope", {}, 404, "not_found"],
  ];

  it.each(cases)("%s (%s %s) answers the typed error, and no session appears", async (_name, method, path, opts, status, code) => {
    const before = await api(stack.url, stack.token, "GET", "/v1/sessions?includeTerminal=true&limit=500");
    const token = opts.token === null ? undefined : (opts.token ?? stack.token);
    const answer = await api(stack.url, token, method, path, opts.body, opts.raw);
    expect(answer.status).toBe(status);
    expect(answer.body).toMatchObject({ error: { code } });
    const after = await api(stack.url, stack.token, "GET", "/v1/sessions?includeTerminal=true&limit=500");
    // The same sessions, and none changed by the bad request (earlier sessions may still be
    // settling — a teardown's usage report — so compare what a bad request could touch).
    const ids = (b: unknown) => (b as { sessions: Array<{ id: string; state: string; name?: string }> }).sessions.map((x) => `${x.id}:${x.name ?? ""}`);
    expect(ids(after.body)).toEqual(ids(before.body));
  });

  it("a garbage runner fact is terminated and counted, and the scheduler keeps working", async () => {
    await jetstream(nc).publish("paddock.runner.default.runner-1.events", "{\"type\":\"running\",\"bogus\":true}");
    await jetstream(nc).publish("paddock.runner.default.runner-1.events", "not json");
    const s = sessionOf(await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["true"] } }));
    await waitForAuditEvents(nc, "default", s.id, (evs) => evs.some((e) => e.action === "exit"));
    const metrics = await (await fetch(`http://127.0.0.1:${String(stack.scheduler.ready.opsPort)}/metrics`)).text();
    const line = metrics.split("\n").find((l) => l.startsWith("paddock_invalid_messages_total"));
    expect(line).toBeDefined();
    expect(Number(line?.split(" ").pop())).toBeGreaterThanOrEqual(2);
  });
});

describe("every service", () => {
  it("serves /healthz, /readyz and /metrics", async () => {
    for (const svc of [stack.scheduler, stack.recorder, stack.gateway, ...stack.runners]) {
      const base = `http://127.0.0.1:${String(svc.ready.opsPort)}`;
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      expect((await fetch(`${base}/readyz`)).status).toBe(200);
      const metrics = await fetch(`${base}/metrics`);
      expect(metrics.status).toBe(200);
      expect(await metrics.text()).toContain("process_cpu_seconds_total");
    }
  });

  it("never logs the token", () => {
    for (const svc of [stack.scheduler, stack.recorder, stack.gateway, ...stack.runners]) {
      expect(svc.output()).not.toContain(stack.token);
    }
  });
});
