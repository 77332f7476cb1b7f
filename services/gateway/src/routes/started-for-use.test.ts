/**
 * A call that needs the session's sandbox, made while the sandbox is being
 * made (`creating`: its output may already show), waits until the session
 * runs instead of answering 409 (routes/wake.ts startedForUse). The
 * stand-in scheduler commits state changes as the scheduler does (record,
 * then an AUDIT event); the wait's timer is the injected `after`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Subscription } from "@nats-io/transport-node";
import { WebSocket } from "ws";
import { createBusMetrics, serveRpc } from "@paddock/bus";
import { execRpcs, workspaceRpcs, type SessionState } from "@paddock/contracts";
import { silentLogger } from "@paddock/logging";
import { api, expectError, makeSession, ManualAfter, RUNNER, startHarness, TOKENS, WS1, type Harness } from "../testing/testkit.ts";

const timers = new ManualAfter();
let h: Harness;
let subs: Subscription[] = [];
/** What the stand-in runner was asked, by operation. */
const asked: string[] = [];

beforeAll(async () => {
  h = await startHarness({ after: timers.after });
  const opts = { queue: "runner", metrics: createBusMetrics(), log: silentLogger() };
  subs = [
    serveRpc(h.nc, workspaceRpcs(RUNNER.poolId, RUNNER.id).diff, () => {
      asked.push("diff");
      return Promise.resolve({ repos: [], truncated: false });
    }, opts),
    serveRpc(h.nc, workspaceRpcs(RUNNER.poolId, RUNNER.id).watch, (req) => {
      asked.push("watch");
      return Promise.resolve({ watchId: req.watchId });
    }, opts),
    serveRpc(h.nc, workspaceRpcs(RUNNER.poolId, RUNNER.id).unwatch, () => Promise.resolve({ stopped: true }), opts),
    serveRpc(h.nc, execRpcs(RUNNER.poolId, RUNNER.id).start, (req) => {
      asked.push("exec");
      return Promise.resolve({ execId: req.execId, startedAt: 1, done: { exit: { exitCode: 0, signal: null, durationMs: 1, timedOut: false }, stdout: "", stderr: "" } });
    }, opts),
  ];
});
afterAll(async () => {
  for (const s of subs) s.unsubscribe();
  await h.stop();
});

let n = 0;
function sessionIn(state: SessionState): string {
  const id = `sfu${++n}`;
  h.scheduler.put(makeSession({ id, workspaceId: WS1, creatorId: "alice", state, poolId: RUNNER.poolId, runnerId: RUNNER.id, placementGeneration: 2 }));
  return id;
}

/** Starts a call and resolves once it is waiting: its second read of the record (the wait subscribes before it). */
async function waiting(call: () => ReturnType<typeof api>): Promise<{ answer: ReturnType<typeof api> }> {
  const first = h.scheduler.nextCall("get");
  const answer = call();
  await first;
  await h.scheduler.nextCall("get");
  return { answer };
}

const diff = (id: string) => () => api(h.url, "GET", `/v1/sessions/${id}/diff`, { token: TOKENS.alice });
const exec = (id: string) => () => api(h.url, "POST", `/v1/sessions/${id}/exec`, { token: TOKENS.alice, body: JSON.stringify({ cmd: ["true"] }) });
const commit = (id: string, to: SessionState) => h.scheduler.commit(h.scheduler.sessions.get(`${WS1}.${id}`)!, to);

describe("a call to a session whose sandbox is being made", () => {
  it("a workspace call and an exec wait for it to run, then are carried out", async () => {
    for (const [call, op] of [[diff, "diff"], [exec, "exec"]] as const) {
      const id = sessionIn("creating");
      asked.length = 0;
      const { answer } = await waiting(call(id));
      expect(asked).toEqual([]);
      commit(id, "running");
      const r = await answer;
      expect(r.status).toBe(200);
      expect(asked).toEqual([op]);
    }
  });

  it("a files watch opens once it runs, its runner asked only then", async () => {
    const id = sessionIn("creating");
    asked.length = 0;
    let ws: WebSocket | undefined;
    const opened = new Promise<void>((resolve, reject) => {
      const first = h.scheduler.nextCall("get");
      ws = new WebSocket(`${h.wsUrl}/v1/sessions/${id}/files/watch?path=`, { headers: { authorization: `Bearer ${TOKENS.alice}` } });
      ws.once("open", () => resolve());
      ws.once("unexpected-response", (_req, res) => reject(new Error(`upgrade answered ${res.statusCode}`)));
      void first.then(() => h.scheduler.nextCall("get")).then(() => {
        expect(asked).toEqual([]);
        commit(id, "running");
      });
    });
    await opened;
    expect(asked).toEqual(["watch"]);
    ws?.close();
  });

  it("one that fails meanwhile is refused (409) and its runner never asked", async () => {
    const id = sessionIn("creating");
    asked.length = 0;
    const { answer } = await waiting(diff(id));
    commit(id, "failed");
    expectError(await answer, 409, "conflict");
    expect(asked).toEqual([]);
  });

  it("one still being made when the wait ends is unavailable (retry), its runner never asked", async () => {
    const id = sessionIn("creating");
    asked.length = 0;
    const { answer } = await waiting(exec(id));
    timers.fire();
    expectError(await answer, 503, "unavailable");
    expect(asked).toEqual([]);
  });

  it("a queued session is refused at once, as before: it has no runner yet", async () => {
    const id = `sfu${++n}`;
    h.scheduler.put(makeSession({ id, workspaceId: WS1, creatorId: "alice", state: "queued" }));
    expectError(await diff(id)(), 409, "conflict");
    expect(h.scheduler.callsOf("get").filter((c) => (c.request as { sessionId: string }).sessionId === id)).toHaveLength(1);
  });
});
