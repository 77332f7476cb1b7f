/**
 * The held check against a stand-in scheduler: placements the scheduler names
 * as ended are torn down like a destroy (processes killed, destroyed fact);
 * the rest keep running; placements held for less than the interval are not
 * asked about.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { DispatchCommand } from "@paddock/contracts";
import { agentTestServer, collectFacts, counterValue, dispatchTo, fakeScheduler, testAgent, type TestAgent } from "../testing/test-support.ts";

const env = agentTestServer();

function startCmd(t: TestAgent, sessionId: string): DispatchCommand {
  return { type: "start", sessionId, workspaceId: "ws1", runnerGeneration: t.agent.generation, placementGeneration: 1, spec: { cmd: ["sleep", "600"] }, mode: "run", trigger: "initial" };
}

/** A started agent (with its stand-in scheduler) running the given sessions. */
async function agentRunning(heldCheckMs: number, sessionIds: string[]) {
  const scheduler = fakeScheduler(env.nc, 0);
  const t = testAgent(env.nc, { heldCheckMs });
  env.agents.push(t);
  await t.agent.start();
  const facts = collectFacts(env.nc, t.config.poolId, t.config.runnerId);
  for (const id of sessionIds) await dispatchTo(env.nc, t, startCmd(t, id));
  for (const id of sessionIds) await facts.waitFor((f) => f.sessionId === id && f.type === "running");
  return { scheduler, t, facts };
}

describe("held check", () => {
  it("tears down the placements the scheduler names as ended and keeps the rest", async () => {
    // 0: no periodic checks (the test runs one); every placement counts as held long enough.
    const { scheduler, t, facts } = await agentRunning(0, ["ended1", "kept1"]);
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
    const { scheduler, t } = await agentRunning(60_000, ["young1"]);
    scheduler.ended = (req) => req.sessions;
    expect(await t.agent.testing.checkHeld()).toEqual([]);
    expect(scheduler.heldChecks.items).toHaveLength(0);
    expect(t.agent.sessions.get("young1")?.phase).toBe("running");
    scheduler.sub.unsubscribe();
  });
});
