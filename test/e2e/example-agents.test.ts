/**
 * The fan-out example (examples/fan-out-agents.ts, issue 26 item 7) against
 * the real stack on a bwrap runner: three one-shot children, each running the
 * stand-in agent (declare, two turns, park, a successor resumes it and runs a
 * third). Each child's tokens are what its stand-in reported on its terminal
 * (and the bytes it wrote), its lineage is parked predecessor → live
 * successor, its diff holds the files its turns wrote, the audit trail's
 * `agent.turn` events carry the same tokens, and every child is released.
 * Nothing sleeps: the example waits on the wait route and events; the test on
 * terminal output, audit events and session records.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Session } from "@paddock/contracts";
import { startStack, untilSession, type Stack } from "@paddock/testing";
import { fanOutAgents, type ChildResult } from "../../examples/fan-out-agents.ts";
import { api, stackClient, waitForAuditEvents } from "./helpers.ts";

// Clear of the ranges other e2e files and the runner-agent tests use (300_000 + 64k and 320_000 + 64k
// span 300_000–384_000; 400_000 + … spans to 464_000): the even halves of 64-uid slots from 500_000.
const UID_FIRST = 500_000 + (process.pid % 1_000) * 64;
const CHILDREN = 3;
const TURNS = 2;
let stack: Stack;
let nc: NatsConnection;

const { outputOf } = stackClient(() => stack);

beforeAll(async () => {
  stack = await startStack({ env: { "runner-agent": { PADDOCK_SANDBOX: "bwrap", PADDOCK_SANDBOX_UID_FIRST: String(UID_FIRST), PADDOCK_SANDBOX_UID_COUNT: "32" } } });
  nc = await connect({ servers: stack.nats.url });
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

/** What the stand-in writes in turn n of agent id: its tokens are these bytes. */
function turnFile(id: string, n: number): string {
  return `agent ${id}, turn ${n}\n` + Array.from({ length: 20 * n }, (_, i) => `${i + 1}\n`).join("");
}

describe("examples/fan-out-agents.ts", () => {
  it("fans out one-shot children whose agents hand off once; collects lineage, tokens and diffs; releases them", async () => {
    /** Each child's terminal once its successor is done: the stand-in's own reports. */
    const terminals = new Map<string, string>();
    const summary = await fanOutAgents({
      url: stack.url,
      token: stack.token,
      children: CHILDREN,
      turns: TURNS,
      beforeRelease: async (child: ChildResult) => {
        const last = child.agents.at(-1)?.id ?? "";
        terminals.set(child.sessionId, await outputOf(child.sessionId, (t) => t.includes(`DONE ${last}`)));
      },
    });

    expect(summary.children).toHaveLength(CHILDREN);
    expect(new Set(summary.children.map((c) => c.sessionId)).size).toBe(CHILDREN);
    for (const child of summary.children) {
      const [first, successor] = child.agents;
      expect(child.agents).toHaveLength(2);
      expect(first).toMatchObject({ state: "parked", runtime: "stand-in", model: "stand-in-1", successorId: successor?.id, turn: { state: "done", count: TURNS } });
      expect(first?.predecessorId).toBeUndefined();
      expect(successor).toMatchObject({ state: "live", runtime: "stand-in", model: "stand-in-2", handoffId: `handoff-of-${first?.id}`, predecessorId: first?.id, turn: { state: "done", count: 1 } });
      expect(successor?.successorId).toBeUndefined();
      expect(successor?.pidNamespace).toBe(first?.pidNamespace);
      expect(successor?.pid).not.toBe(first?.pid);

      // Tokens: what the stand-in reported on its terminal, per agent and in all, and the bytes it wrote.
      const reported = new Map<string, number>();
      for (const m of (terminals.get(child.sessionId) ?? "").matchAll(/REPORTED agent=(\S+) turn=(\d+) tokens=(\d+)/g)) {
        expect(Number(m[3])).toBe(Buffer.byteLength(turnFile(m[1] ?? "", Number(m[2]))));
        reported.set(m[1] ?? "", (reported.get(m[1] ?? "") ?? 0) + Number(m[3]));
      }
      expect(Object.fromEntries(child.agents.map((a) => [a.id, a.usage.tokens]))).toEqual(Object.fromEntries(reported));
      expect(child.tokens).toBe([...reported.values()].reduce((a, b) => a + b, 0));

      // The diff: every turn's file, staged in the workspace's repository, with what was written.
      const files = [...Array.from({ length: TURNS }, (_, i) => `notes/${first?.id}-turn-${i + 1}.txt`), `notes/${successor?.id}-turn-1.txt`];
      expect([...child.files].sort()).toEqual(files.sort());
      expect(child.diff).toContain(`+agent ${first?.id}, turn ${TURNS}\n`);
      expect(child.diff).toContain(`+agent ${successor?.id}, turn 1\n`);

      // The audit trail: one agent.turn event per start and end, the ends' tokens summing to the same totals.
      const ends = (es: { action: string; agent?: { turn?: string } }[]) => es.filter((e) => e.action === "agent.turn" && e.agent?.turn === "end");
      const events = await waitForAuditEvents(nc, "default", child.sessionId, (es) => ends(es).length >= TURNS + 1);
      const turns = events.filter((e) => e.action === "agent.turn");
      expect(turns).toHaveLength(2 * (TURNS + 1));
      expect(turns.reduce((sum, e) => sum + e.usage.agentTokenCount, 0)).toBe(child.tokens);
      for (const a of child.agents) {
        expect(turns.filter((e) => e.agent?.id === a.id).reduce((sum, e) => sum + e.usage.agentTokenCount, 0)).toBe(a.usage.tokens);
      }
      expect(events.filter((e) => e.action === "agent.resume").map((e) => e.agent)).toEqual([{ id: first?.id, successorId: successor?.id }]);

      // Released: destroyed, and no longer among the live sessions.
      expect(child.releasedState).toBe("destroyed");
      await untilSession(nc, child.sessionId, (s) => s.state === "destroyed");
    }
    expect(summary.tokens).toBe(summary.children.reduce((sum, c) => sum + c.tokens, 0));
    const live = (await api(stack.url, stack.token, "GET", "/v1/sessions")).body as { sessions: Session[] };
    for (const c of summary.children) expect(live.sessions.some((s) => s.id === c.sessionId)).toBe(false);
  });
});
