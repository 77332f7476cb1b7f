/**
 * Idle policy, lifetime and wake on use through the real stack (issue 25
 * items 3 and 4): a session with nothing going on suspends warm, then cold,
 * each step saying why (`idle`) on the record and its audit event; a preview
 * request wakes it from either and is answered (the app restarted after a
 * cold resume); a GET of the record wakes nothing; a session's lifetime ends
 * it (`lifetime`). Every wait is on the record's state (long polls), never a
 * clock.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Session } from "@paddock/contracts";
import { previewAppSpec, putPreviewApp, startStack, untilAnswers, type Stack } from "@paddock/testing";
import { api, stackClient, Terminal, waitForAuditEvents } from "./helpers.ts";

let stack: Stack;
let nc: NatsConnection;

const { createSession } = stackClient(() => stack);

/** The record once it is in state (a long poll of up to a minute). */
async function once(id: string, state: string): Promise<Session> {
  const r = await api(stack.url, stack.token, "GET", `/v1/sessions/${id}?waitFor=${state}&timeoutMs=60000`);
  return r.body as Session;
}

beforeAll(async () => {
  stack = await startStack({ env: { "runner-agent": { PADDOCK_RUNNER_ACTIVITY_MS: "500" } } });
  nc = await connect({ servers: stack.nats.url });
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

describe("an idle session", () => {
  it("suspends warm, then cold, saying why; a preview request wakes it from either and is answered", async () => {
    const s = await createSession({
      spec: { apps: [previewAppSpec("web", [{ port: 8000, public: true }])] },
      idle: { warmAfterMs: 2_000, coldAfterMs: 6_000 },
    });
    await once(s.id, "running");
    // A write: it would wake the session had it gone idle meanwhile.
    await putPreviewApp(stack.url, stack.token, s.id);
    expect(s.idle).toEqual({ warmAfterMs: 2_000, coldAfterMs: 6_000 });
    const preview = `${stack.url}/v1/sessions/${s.id}/ports/8000/`;

    const warm = await once(s.id, "suspended_warm");
    expect([warm.state, warm.stateReason]).toEqual(["suspended_warm", "idle"]);
    // A GET of the record woke nothing.
    expect(((await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}`)).body as Session).state).toBe("suspended_warm");
    const fromWarm = await fetch(preview);
    expect([fromWarm.status, await fromWarm.text()]).toEqual([200, "hello from port 8000\n"]);
    const running = (await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}`)).body as Session;
    expect(running.state).toBe("running");
    expect(running.stateReason).toBeUndefined();

    const cold = await once(s.id, "suspended_cold");
    expect([cold.state, cold.stateReason]).toEqual(["suspended_cold", "idle"]);
    const fromCold = await fetch(preview);
    expect([fromCold.status, await fromCold.text()]).toEqual([200, "hello from port 8000\n"]);
    expect(((await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}`)).body as Session).state).toBe("running");

    const events = await waitForAuditEvents(nc, "default", s.id, (e) => e.filter((x) => x.action === "suspend" && x.reason === "idle").length >= 2);
    expect(events.filter((x) => x.action === "resume").length).toBeGreaterThanOrEqual(2);
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
  });

  it("is woken by a controller's attach, never by a viewer's", async () => {
    const s = await createSession({ spec: { cmd: ["sh", "-c", "echo READY; exec sleep 3600"] } });
    await once(s.id, "running");
    const suspended = await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/suspend?wait=suspended_warm&timeoutMs=60000`, { warm: true });
    expect((suspended.body as Session).state).toBe("suspended_warm");
    const viewer = await Terminal.open(stack.url, stack.token, s.id, "since=all");
    expect(((await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}`)).body as Session).state).toBe("suspended_warm");
    viewer.ws.close();
    const controller = await Terminal.open(stack.url, stack.token, s.id, "since=all&mode=controller");
    expect(((await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}`)).body as Session).state).toBe("running");
    controller.ws.close();
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
  });

  it("ends at its lifetime, saying why; the environment's policy is the default, the session's own wins", async () => {
    const env = await api(stack.url, stack.token, "POST", "/v1/environments", { name: "short-lived", maxLifetimeMs: 600_000, idle: { warmAfterMs: 300_000 } });
    expect(env.status).toBe(201);
    const envId = (env.body as { id: string }).id;
    const s = await createSession({ environmentId: envId, spec: { cmd: ["sleep", "3600"] }, maxLifetimeMs: 1_500, idle: { coldAfterMs: 600_000 } });
    expect([s.maxLifetimeMs, s.idle]).toEqual([1_500, { warmAfterMs: 300_000, coldAfterMs: 600_000 }]);
    const ended = await once(s.id, "destroyed");
    expect([ended.state, ended.stateReason]).toEqual(["destroyed", "lifetime"]);
    await waitForAuditEvents(nc, "default", s.id, (e) => e.some((x) => x.action === "delete" && x.reason === "lifetime"));
    // Bad policies are refused.
    for (const body of [{ idle: { warmAfterMs: 5 } }, { idle: { coldAfterMs: -1 } }, { idle: { later: 1 } }, { maxLifetimeMs: 0 }, { maxLifetimeMs: 1e15 }]) {
      expect((await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["true"] }, ...body })).status, JSON.stringify(body)).toBe(400);
    }
  });
});

describe("wake on use", () => {
  it("resumes a cold session on another runner for a preview request (its own cordoned), and the request is answered", async () => {
    const s = await createSession({ spec: { apps: [previewAppSpec("web", [{ port: 8000, public: true }])] } });
    const first = await once(s.id, "running");
    await putPreviewApp(stack.url, stack.token, s.id);
    const preview = `${stack.url}/v1/sessions/${s.id}/ports/8000/`;
    await untilAnswers(preview);
    const cold = await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/suspend?wait=suspended_cold&timeoutMs=60000`, { warm: false });
    expect((cold.body as Session).state).toBe("suspended_cold");
    await stack.addRunner({ runnerId: "runner-wake-2" });
    expect((await api(stack.url, stack.token, "POST", `/v1/runners/${first.runnerId ?? ""}/cordon`, {})).status).toBe(200);
    try {
      const woken = await fetch(preview);
      expect([woken.status, await woken.text()]).toEqual([200, "hello from port 8000\n"]);
      const now = (await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}`)).body as Session;
      expect([now.state, now.runnerId]).toEqual(["running", "runner-wake-2"]);
    } finally {
      await api(stack.url, stack.token, "POST", `/v1/runners/${first.runnerId ?? ""}/uncordon`, {});
      await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
    }
  });
});
