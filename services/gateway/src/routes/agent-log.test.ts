/**
 * The agent log against a real nats-server: two gateways (two AgentLog
 * instances, two connections) appending to one session's log at once lose
 * nothing and never write a fact against a state it was not checked on —
 * of two racing "start" reports on one ready agent exactly one is accepted.
 * The fold keeps the claim untouched by markers and sums tokens.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { provision } from "@paddock/bus";
import { ConflictError, type AgentFact } from "@paddock/contracts";
import { useNatsServer } from "@paddock/testing/vitest";
import { AgentLog, type AgentLogState } from "./agent-log.ts";

let n = 0;
const id = () => `evt_${String(++n)}`;
const base = (agentId: string) => ({ id: id(), agentId, at: 1, actorId: "ses1", creatorId: "alice", placementGeneration: 1 });
const declare = (agentId: string, pid: number): AgentFact => ({ ...base(agentId), type: "declare", claim: { pid, runtime: "r" }, runnerId: "r1" });

describe("AgentLog", () => {
  const nats = useNatsServer();
  let second: NatsConnection;
  let one: AgentLog;
  let two: AgentLog;
  beforeAll(async () => {
    await provision(nats.nc, { replicas: 1 });
    second = await connect({ servers: nats.url });
    one = new AgentLog(nats.nc, () => jetstreamManager(nats.nc));
    two = new AgentLog(second, () => jetstreamManager(second));
  });

  it("two writers declaring at once lose nothing: every fact lands once, in one order both read", async () => {
    await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? one : two).append("ws1", "s1", () => declare(`agt_${i}`, i + 1))));
    const [a, b] = await Promise.all([one.read("ws1", "s1"), two.read("ws1", "s1")]);
    expect(a.facts).toBe(40);
    expect([...a.agents.keys()].sort()).toEqual(Array.from({ length: 40 }, (_, i) => `agt_${i}`).sort());
    expect([...b.agents.keys()]).toEqual([...a.agents.keys()]);
    expect(b.seq).toBe(a.seq);
  });

  it("a fact is only written against the state it was checked on: of two racing starts, one wins", async () => {
    await one.append("ws1", "s2", () => declare("agt_x", 7));
    const start = (log: AgentLog) =>
      log.append("ws1", "s2", (st: AgentLogState) => {
        if (st.agents.get("agt_x")?.turn.state === "busy") throw new ConflictError("already busy");
        return { ...base("agt_x"), type: "turn", event: "start", tokens: 3 };
      });
    const outcomes = await Promise.allSettled([start(one), start(two), start(one), start(two)]);
    expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(1);
    expect(outcomes.filter((o) => o.status === "rejected").map((o) => (o as PromiseRejectedResult).reason)).toEqual(Array(3).fill(expect.any(ConflictError)));
    const st = await two.read("ws1", "s2");
    expect(st.agents.get("agt_x")).toMatchObject({ turn: { state: "busy", count: 1 }, tokens: 3 });
  });

  it("markers leave the declaration as it was; a successor links both ways; nothing to append answers the state", async () => {
    await one.append("ws1", "s3", () => declare("agt_p", 5));
    await one.append("ws1", "s3", () => ({ ...base("agt_p"), type: "park" }));
    await two.append("ws1", "s3", () => ({ ...base("agt_p"), type: "resume", successorId: "agt_s", claim: { pid: 6, runtime: "r", model: "m" }, runnerId: "r1" }));
    const { fact, state } = await one.append("ws1", "s3", () => undefined);
    expect(fact).toBeUndefined();
    expect(state.agents.get("agt_p")).toMatchObject({ claim: { pid: 5, runtime: "r" }, successorId: "agt_s", parkedAt: 1 });
    expect(state.agents.get("agt_s")).toMatchObject({ claim: { pid: 6, model: "m" }, predecessorId: "agt_p", turn: { state: "ready", count: 0 } });
    expect(state.facts).toBe(3);
  });
});
