/**
 * Agents' facts become audit events exactly once (issue 26, item 5): each
 * fact on stream AGENTS is one event on its session's AUDIT subject, a turn's
 * tokens as `usage.agentTokenCount` under the placement generation it was
 * reported in, no claim text copied; two replicas and a full replay add none.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { Registry } from "prom-client";
import { AgentFact, AuditEvent, Streams, Subjects } from "@paddock/contracts";
import { encoderOf, provision } from "@paddock/bus";
import { silentLogger } from "@paddock/logging";
import { FIXTURE_NOW } from "@paddock/testing";
import { useNatsServer } from "@paddock/testing/vitest";
import { agentEvent, parseAgentsSubject } from "./derive.ts";
import { createRecorder, FEED_CONSUMER } from "./recorder.ts";
import { createRecorderMetrics } from "./metrics.ts";

const base = { agentId: "agt1", at: FIXTURE_NOW, actorId: "ses1", creatorId: "alice", placementGeneration: 2 };
const facts: AgentFact[] = [
  { ...base, id: "evt_a1", type: "declare", claim: { pid: 7, runtime: "CLAIM_MARKER", model: "MODEL_MARKER" }, seen: { hostPid: 4242, startTicks: 99, pidNamespace: 4026531836 }, runnerId: "r1" },
  { ...base, id: "evt_a2", type: "turn", event: "start", tokens: 5 },
  { ...base, id: "evt_a3", type: "turn", event: "end", tokens: 70 },
  { ...base, id: "evt_a4", type: "park" },
  { ...base, id: "evt_a5", type: "resume", successorId: "agt2", claim: { pid: 9, runtime: "CLAIM_MARKER" }, runnerId: "r1", placementGeneration: 3 },
];

describe("agentEvent (pure)", () => {
  it("names the agent, carries a turn's tokens as usage, and nothing of the claim or the host", () => {
    const where = { workspaceId: "ws1", sessionId: "ses1" };
    expect(agentEvent(facts[2] as AgentFact, where)).toMatchObject({
      id: "evt_a3",
      action: "agent.turn",
      resource: { kind: "session", workspaceId: "ws1", id: "ses1", creatorId: "alice" },
      usage: { agentTokenCount: 70, cpuTimeSeconds: 0 },
      placementGeneration: 2,
      agent: { id: "agt1", turn: "end" },
    });
    expect(agentEvent(facts[4] as AgentFact, where)).toMatchObject({ action: "agent.resume", agent: { id: "agt1", successorId: "agt2" }, placementGeneration: 3 });
    const all = JSON.stringify(facts.map((f) => agentEvent(f, where)));
    expect(all).not.toMatch(/CLAIM_MARKER|MODEL_MARKER|4242|hostPid/);
    for (const f of facts) expect(AuditEvent.strict().safeParse(agentEvent(f, where)).success).toBe(true);
  });

  it("parses only AGENTS subjects", () => {
    expect(parseAgentsSubject(Subjects.agents("ws1", "ses1"))).toEqual({ workspaceId: "ws1", sessionId: "ses1" });
    expect(parseAgentsSubject("paddock.agents.ws1")).toBeUndefined();
    expect(parseAgentsSubject("paddock.audit.ws1.ses1")).toBeUndefined();
  });
});

describe("the AGENTS feed against a real nats-server", () => {
  const nats = useNatsServer();
  beforeAll(async () => {
    await provision(nats.nc, { replicas: 1 });
  });

  const mk = async () => {
    const recorder = createRecorder({ nc: await connect({ servers: nats.url }), log: silentLogger(), metrics: createRecorderMetrics(new Registry()) });
    await recorder.start();
    return recorder;
  };

  async function drained(): Promise<void> {
    const jsm = await jetstreamManager(nats.nc);
    for (;;) {
      const info = await jsm.consumers.info(Streams.agents, FEED_CONSUMER);
      if (info.num_pending === 0 && info.num_ack_pending === 0) return;
      await new Promise((r) => setImmediate(r));
    }
  }

  it("two replicas record each fact once; a malformed fact is skipped; a full replay adds none", async () => {
    const [a, b] = [await mk(), await mk()];
    const js = jetstream(nats.nc);
    const encode = encoderOf(nats.nc);
    for (const f of facts) await js.publish(Subjects.agents("ws1", "ses1"), encode(AgentFact, f), { msgID: f.id });
    await js.publish(Subjects.agents("ws1", "ses1"), new TextEncoder().encode('{"type":"turn"}'));
    await drained();
    const consumer = await js.consumers.get(Streams.audit, { filter_subjects: [Subjects.audit("ws1", "session", "ses1")], deliver_policy: DeliverPolicy.All });
    const events: AuditEvent[] = [];
    for await (const m of await consumer.consume()) {
      events.push(AuditEvent.parse(m.json()));
      if (events.length === facts.length) break;
    }
    expect(events.map((e) => e.action).sort()).toEqual(["agent.declare", "agent.park", "agent.resume", "agent.turn", "agent.turn"]);
    expect(events.reduce((sum, e) => sum + e.usage.agentTokenCount, 0)).toBe(75);

    await a.stop();
    await b.stop();
    const jsm = await jetstreamManager(nats.nc);
    await jsm.consumers.delete(Streams.agents, FEED_CONSUMER);
    const c = await mk();
    await drained();
    await c.stop();
    expect((await jsm.streams.info(Streams.audit)).state.messages).toBe(facts.length);
  });
});
