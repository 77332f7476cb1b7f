/**
 * Waiting without polling (issue 24 item 7): `?wait=STATE` on a create and
 * the lifecycle calls, `?waitFor=STATE` on GET, each with `timeoutMs`. The
 * stand-in scheduler commits state changes as the scheduler does (record,
 * then an AUDIT event); the wait's timer is the injected `after`.
 */
import { describe, expect, it } from "vitest";
import { DEFAULT_WAIT_MS, MAX_WAIT_MS, type SessionState } from "@paddock/contracts";
import { api, expectError, makeSession, ManualAfter, TOKENS, useHarness, WS1 } from "../testing/testkit.ts";

const timers = new ManualAfter();
const h = useHarness({ after: timers.after });

let n = 0;
function sessionIn(state: SessionState): string {
  const id = `w${++n}`;
  h.scheduler.put(makeSession({ id, workspaceId: WS1, creatorId: "alice", state }));
  return id;
}

/**
 * Starts `GET ?waitFor=…` and resolves once the gateway is waiting: its
 * second read of the record (the first authorizes; the wait subscribes to
 * the session's AUDIT subject before the second).
 */
async function waitingGet(query: string): Promise<{ answer: ReturnType<typeof api> }> {
  const first = h.scheduler.nextCall("get");
  const answer = api(h.url, "GET", query, { token: TOKENS.alice });
  await first;
  await h.scheduler.nextCall("get");
  // Wrapped: an async function returning the answer itself would wait for it.
  return { answer };
}

describe("waiting for a session's state", () => {
  it("GET ?waitFor=running answers when a committed fact puts the session there", async () => {
    const id = sessionIn("creating");
    const { answer } = await waitingGet(`/v1/sessions/${id}?waitFor=running&timeoutMs=60000`);
    h.scheduler.commit(h.scheduler.sessions.get(`${WS1}.${id}`)!, "running");
    const r = await answer;
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ id, state: "running", waited: { state: "running", outcome: "reached" } });
  });

  it("keeps waiting through states on the way, and answers unreachable once the session can no longer come to the state", async () => {
    const id = sessionIn("running");
    const { answer } = await waitingGet(`/v1/sessions/${id}?waitFor=queued`);
    // suspended_warm can still come to queued (by a cold suspend); destroyed never.
    const warm = h.scheduler.commit(h.scheduler.sessions.get(`${WS1}.${id}`)!, "suspended_warm");
    await h.scheduler.nextCall("get");
    h.scheduler.commit(warm, "destroyed");
    expect((await answer).json).toMatchObject({ id, state: "destroyed", waited: { state: "queued", outcome: "unreachable" } });
  });

  it("answers at once when the session is already there, or can never be", async () => {
    const running = sessionIn("running");
    expect((await api(h.url, "GET", `/v1/sessions/${running}?waitFor=running`, { token: TOKENS.alice })).json).toMatchObject({ state: "running", waited: { outcome: "reached" } });
    const failed = sessionIn("failed");
    expect((await api(h.url, "GET", `/v1/sessions/${failed}?waitFor=running`, { token: TOKENS.alice })).json).toMatchObject({ state: "failed", waited: { state: "running", outcome: "unreachable" } });
    // Without a state to wait for: the record, and no `waited`.
    expect((await api(h.url, "GET", `/v1/sessions/${running}`, { token: TOKENS.alice })).json).not.toHaveProperty("waited");
  });

  it("answers timeout, with the record as it is, when timeoutMs passes (DEFAULT_WAIT_MS when unsaid)", async () => {
    const id = sessionIn("creating");
    const { answer } = await waitingGet(`/v1/sessions/${id}?waitFor=running&timeoutMs=1234`);
    expect(timers.armed).toContain(1234);
    timers.fire();
    expect((await answer).json).toMatchObject({ id, state: "creating", waited: { state: "running", outcome: "timeout" } });
    expect(timers.armed).not.toContain(1234);

    const { answer: unsaid } = await waitingGet(`/v1/sessions/${id}?waitFor=running`);
    expect(timers.armed).toContain(DEFAULT_WAIT_MS);
    timers.fire();
    expect((await unsaid).json).toMatchObject({ waited: { outcome: "timeout" } });
  });

  it("stops waiting when the client goes away", async () => {
    const id = sessionIn("creating");
    const gone = new AbortController();
    const first = h.scheduler.nextCall("get");
    const request = fetch(`${h.url}/v1/sessions/${id}?waitFor=running&timeoutMs=4321`, { headers: { authorization: `Bearer ${TOKENS.alice}` }, signal: gone.signal }).catch((err: unknown) => err);
    await first;
    await h.scheduler.nextCall("get");
    expect(timers.armed).toContain(4321);
    gone.abort();
    expect(await request).toBeInstanceOf(Error);
    // The gateway sees the connection close and drops its timer (and its subscription) without any event.
    for (let i = 0; i < 200 && timers.armed.includes(4321); i++) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(timers.armed).not.toContain(4321);
  });

  it("POST /v1/sessions?wait=running answers the created session with how the wait ended", async () => {
    const r = await api(h.url, "POST", "/v1/sessions?wait=running&timeoutMs=60000", { token: TOKENS.alice, body: JSON.stringify({ spec: { cmd: ["true"] } }) });
    expect(r.status).toBe(201);
    expect(r.json).toMatchObject({ state: "running", waited: { state: "running", outcome: "reached" } });
  });

  it("the lifecycle calls take ?wait= too: suspend, resume, restart, delete, and recycle (for the replacement)", async () => {
    const id = sessionIn("running");
    const suspended = await api(h.url, "POST", `/v1/sessions/${id}/suspend?wait=suspended_cold`, { token: TOKENS.alice, body: JSON.stringify({ warm: false }) });
    expect(suspended.json).toMatchObject({ state: "suspended_cold", waited: { state: "suspended_cold", outcome: "reached" } });
    const deleted = await api(h.url, "DELETE", `/v1/sessions/${id}?wait=destroyed`, { token: TOKENS.alice });
    expect(deleted.json).toMatchObject({ state: "destroyed", waited: { outcome: "reached" } });
    const recycled = await api(h.url, "POST", `/v1/sessions/${sessionIn("running")}/recycle?wait=queued`, { token: TOKENS.alice });
    expect(recycled.status).toBe(201);
    expect(recycled.json).toMatchObject({ session: { state: "queued" }, waited: { state: "queued", outcome: "reached" } });
    expect(recycled.json.session).not.toHaveProperty("waited");
  });

  it("refuses a bad wait (400 invalid) and calls nothing", async () => {
    const id = sessionIn("running");
    const cases: Array<[string, string, string | undefined]> = [
      ["POST", "/v1/sessions?wait=sleeping", JSON.stringify({ spec: {} })],
      ["POST", "/v1/sessions?wait=running&timeoutMs=-1", JSON.stringify({ spec: {} })],
      ["POST", `/v1/sessions?wait=running&timeoutMs=${MAX_WAIT_MS + 1}`, JSON.stringify({ spec: {} })],
      ["POST", "/v1/sessions?wait=running&timeoutMs=1e3", JSON.stringify({ spec: {} })],
      ["POST", "/v1/sessions?timeoutMs=5", JSON.stringify({ spec: {} })],
      ["POST", "/v1/sessions?waitFor=running", JSON.stringify({ spec: {} })],
      ["POST", "/v1/sessions?wait=running&wait=failed", JSON.stringify({ spec: {} })],
      ["GET", `/v1/sessions/${id}?wait=running`, undefined],
      ["GET", `/v1/sessions/${id}?waitFor=`, undefined],
      ["GET", `/v1/sessions/${id}?timeoutMs=100`, undefined],
      ["POST", `/v1/sessions/${id}/snapshot?wait=running`, undefined],
      ["POST", `/v1/sessions/${id}/resume?wait=RUNNING`, undefined],
    ];
    for (const [method, path, body] of cases) {
      const r = await api(h.url, method, path, { token: TOKENS.alice, ...(body !== undefined ? { body } : {}) });
      expectError(r, 400, "invalid");
    }
    expect(h.scheduler.calls).toEqual([]);
  });
});
