/**
 * The held check against a stand-in scheduler: placements the scheduler names
 * as ended are torn down like a destroy (processes killed, destroyed fact);
 * the rest keep running; placements held for less than the interval are not
 * asked about.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { DispatchCommand } from "@paddock/contracts";
import { provision } from "@paddock/bus";
import { startNatsServer, type NatsServerHandle } from "@paddock/testing";
import { collectFacts, counterValue, dispatchTo, fakeScheduler, testAgent, type TestAgent } from "./test-support.ts";

let server: NatsServerHandle;
let nc: NatsConnection;
const agents: TestAgent[] = [];

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url });
  await provision(nc, { replicas: 1 });
});
afterAll(async () => {
  for (const t of agents) await t.agent.stop();
  await nc.drain();
  await server.stop();
});

function startCmd(t: TestAgent, sessionId: string): DispatchCommand {
  return { type: "start", sessionId, workspaceId: "ws1", runnerGeneration: t.agent.generation, placementGeneration: 1, spec: { cmd: ["sleep", "600"] }, mode: "run", trigger: "initial" };
}

describe("held check", () => {
  it("tears down the placements the scheduler names as ended and keeps the rest", async () => {
    const scheduler = fakeScheduler(nc, 0);
    // 0: no periodic checks (the test runs one); every placement counts as held long enough.
    const t = testAgent(nc, { heldCheckMs: 0 });
    agents.push(t);
    await t.agent.start();
    const facts = collectFacts(nc, t.config.poolId, t.config.runnerId);
    await dispatchTo(nc, t, startCmd(t, "ended1"));
    await dispatchTo(nc, t, startCmd(t, "kept1"));
    await facts.waitFor((f) => f.sessionId === "ended1" && f.type === "running");
    await facts.waitFor((f) => f.sessionId === "kept1" && f.type === "running");
    scheduler.ended = (req) => req.sessions.filter((h) => h.sessionId === "ended1");

    const released = await t.agent.testing.checkHeld();
    expect(released.map((h) => h.sessionId)).toEqual(["ended1"]);
    const asked = scheduler.heldChecks.items.at(-1);
    expect(asked).toMatchObject({ poolId: t.config.poolId, runnerId: t.config.runnerId, runnerGeneration: t.agent.generation });
    expect(asked?.sessions.map((h) => h.sessionId).sort()).toEqual(["ended1", "kept1"]);
    await facts.waitFor((f) => f.sessionId === "ended1" && f.type === "destroyed");
    expect(existsSync(join(t.config.dataDir, "sessions", "ended1"))).toBe(false);
    expect(t.agent.sessions.get("ended1")).toBeUndefined();
    expect(t.agent.sessions.get("kept1")?.phase).toBe("running");
    expect(await counterValue(t.metrics.releasedByHeldCheck)).toBe(1);
    scheduler.sub.unsubscribe();
  });

  it("does not ask about placements held for less than the interval", async () => {
    const scheduler = fakeScheduler(nc, 0);
    const t = testAgent(nc, { heldCheckMs: 60_000 });
    agents.push(t);
    await t.agent.start();
    const facts = collectFacts(nc, t.config.poolId, t.config.runnerId);
    await dispatchTo(nc, t, startCmd(t, "young1"));
    await facts.waitFor((f) => f.sessionId === "young1" && f.type === "running");
    scheduler.ended = (req) => req.sessions;
    expect(await t.agent.testing.checkHeld()).toEqual([]);
    expect(scheduler.heldChecks.items).toHaveLength(0);
    expect(t.agent.sessions.get("young1")?.phase).toBe("running");
    scheduler.sub.unsubscribe();
  });
});
