/**
 * Honest answers through the whole stack (real runner processes, real PTYs):
 * a warm → cold suspend checkpoints the stopped app; app generations go on
 * across a cold resume with trigger `resume`; a restart answers its new
 * generation; a signal-killed app is failed with the signal; audit run
 * events name their app generation; a dead session evicted at the workspace
 * limit is torn down at once and its events stay listable.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { RunnerFact, type AuditEvent, type Session } from "@paddock/contracts";
import { startStack, untilSession, type Stack } from "@paddock/testing";
import { api, sessionOf, stackClient, waitForAuditEvents } from "./helpers.ts";

/** Records the workspace keeps: small, so the eviction case below reaches it. */
const WORKSPACE_LIMIT = 4;

let stack: Stack;
let nc: NatsConnection;

beforeAll(async () => {
  stack = await startStack({
    env: {
      scheduler: { PADDOCK_MAX_SESSIONS_PER_WORKSPACE: String(WORKSPACE_LIMIT) },
      // No held check: the eviction's own destroy is the only thing that can tear a dead sandbox down here.
      "runner-agent": { PADDOCK_RUNNER_HELD_CHECK_MS: "0" },
    },
  });
  nc = await connect({ servers: stack.nats.url });
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

const { post, getSession, createSession, outputOf } = stackClient(() => stack);


/** Resolves once the session's record satisfies pred (a KV watch: every revision, no polling). */
async function untilRecord(id: string, pred: (s: Session) => boolean): Promise<Session> {
  await untilSession(nc, id, pred);
  return getSession(id);
}


const runsOf = (events: AuditEvent[]) => events.filter((e) => e.action.startsWith("run.")).map((e) => [e.action, e.run?.app, e.run?.generation, e.run?.trigger]);

describe("honest answers", () => {
  it("warm → cold suspend checkpoints the stopped app; a cold resume goes on to generation 2 (resume); a restart answers generation 3", async () => {
    const script = "if [ -f state ]; then echo restored:$(cat state); else echo first > state; echo wrote; fi; exec sleep 600";
    const s = await createSession({ spec: { cmd: ["sh", "-c", script] } });
    await outputOf(s.id, (t) => t.includes("wrote"));
    const warm = await post(`/v1/sessions/${s.id}/suspend`, { warm: true });
    expect(sessionOf(warm).state).toBe("suspended_warm");
    const cold = await post(`/v1/sessions/${s.id}/suspend`, { warm: false });
    expect(cold.status).toBe(200);
    expect(sessionOf(cold)).toMatchObject({ state: "suspended_cold", checkpoint: { format: "manifest+aes256gcm" } });

    const resumed = await post(`/v1/sessions/${s.id}/resume`, {});
    expect(sessionOf(resumed)).toMatchObject({ state: "running", placementGeneration: 2 });
    await outputOf(s.id, (t) => t.includes("restored:first"));
    const after = await untilRecord(s.id, (r) => r.apps?.main?.generation === 2);
    expect(after.apps?.main).toMatchObject({ generation: 2, trigger: "resume", phase: "running" });

    const restarted = await post(`/v1/sessions/${s.id}/apps/main/restart`);
    expect(restarted.status).toBe(200);
    expect(sessionOf(restarted).apps?.main).toMatchObject({ generation: 3, trigger: "manual", phase: "running" });

    const events = await waitForAuditEvents(nc, "default", s.id, (evs) => evs.some((e) => e.action === "run.started" && e.run?.generation === 3));
    expect(runsOf(events)).toEqual([
      ["run.started", "main", 1, "initial"],
      ["run.started", "main", 2, "resume"],
      ["run.completed", "main", 2, "resume"],
      ["run.started", "main", 3, "manual"],
    ]);
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
  });

  it("an app killed by a signal is failed with it, on the record and on its audit event", async () => {
    // The app kills itself: its pid is its sandbox's, not one the test could signal from the host.
    const s = await createSession({ spec: { cmd: ["sh", "-c", "echo up; kill -KILL $$"] } });
    const dead = await untilRecord(s.id, (r) => r.state === "dead" && r.apps?.main?.phase !== "running");
    expect(dead.apps?.main).toMatchObject({ generation: 1, phase: "failed", signal: "SIGKILL", exitCode: null });
    expect(dead.error).toBe("process killed by SIGKILL");
    const events = await waitForAuditEvents(nc, "default", s.id, (evs) => evs.some((e) => e.action === "run.failed"));
    expect(events.find((e) => e.action === "run.failed")?.run).toEqual({ app: "main", generation: 1, trigger: "initial", exitCode: null, signal: "SIGKILL" });
  });

  it("a dead session evicted at the workspace limit is torn down on its runner at once; its events stay listable", async () => {
    // A dead session keeps its sandbox while its record is kept.
    const dead = await createSession({ spec: { cmd: ["sh", "-c", "echo done; exit 0"] } });
    await untilRecord(dead.id, (r) => r.state === "dead");
    const sandbox = join(stack.dataDir, "runner-1", "sessions", dead.id);
    expect(existsSync(sandbox)).toBe(true);
    const destroyed = destroyedFact(dead.id);
    // Create until the dead session's record gives way (older ended records go first).
    for (let i = 0; i < WORKSPACE_LIMIT + 2 && (await api(stack.url, stack.token, "GET", `/v1/sessions/${dead.id}`)).status === 200; i++) {
      await createSession({ spec: { cmd: ["sleep", "600"] } });
    }
    expect((await api(stack.url, stack.token, "GET", `/v1/sessions/${dead.id}`)).status).toBe(404);
    await destroyed;
    expect(existsSync(sandbox)).toBe(false);
    const events = await api(stack.url, stack.token, "GET", `/v1/events?sessionId=${dead.id}`);
    expect(events.status).toBe(200);
    expect((events.body as { events: AuditEvent[] }).events.map((e) => e.action)).toEqual(expect.arrayContaining(["create", "exit", "evict"]));
  });
});

/** Resolves once the runner reports the session's sandbox torn down (its `destroyed` fact on RUNNER). */
async function destroyedFact(sessionId: string): Promise<void> {
  const consumer = await jetstream(nc).consumers.get("RUNNER", { filter_subjects: ["paddock.runner.>"], deliver_policy: DeliverPolicy.All });
  const messages = await consumer.consume();
  for await (const m of messages) {
    const fact = RunnerFact.parse(m.json());
    if (fact.sessionId === sessionId && fact.type === "destroyed") break;
  }
  await messages.close();
}
