import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { describe, expect, it } from "vitest";
import { applyEnvironmentPatch } from "@paddock/contracts";
import { makeEnvironment, makeRunner, makeSession } from "./records.ts";
import { startNatsServer } from "./nats-server.ts";
import { untilSession } from "./until-session.ts";

describe("record fixtures", () => {
  it("parse by their schema: a record the contract refuses cannot be built", () => {
    expect(() => makeRunner({ capacityUsed: -1 })).toThrow(/capacityUsed/);
    expect(() => makeSession({ state: "asleep" as never })).toThrow(/state/);
    expect(() => makeEnvironment({ secretRefs: ["not a name"] })).toThrow(/secretRefs/);
  });

  it("lay overrides over the defaults; an undefined override removes an optional field", () => {
    const s = makeSession({ id: "a1", creatorId: "alice", runnerId: undefined });
    expect(s).toMatchObject({ id: "a1", creatorId: "alice", state: "running", lastFact: { actorId: "alice" } });
    expect(s).not.toHaveProperty("runnerId");
    expect(makeEnvironment({ id: "e9" })).toMatchObject({ id: "e9", name: "e9" });
  });
});

describe("applyEnvironmentPatch", () => {
  it("absent is unchanged, an empty value clears, requirements merge field by field", () => {
    const env = makeEnvironment({ image: "img", setup: "make", egressAllow: ["a.example"], requirements: { capabilities: ["gpu"], minCpuMillis: 500, minMemoryBytes: 0, minDiskBytes: 0 } });
    const next = applyEnvironmentPatch(env, { image: "", egressAllow: [], requirements: { minMemoryBytes: 1024 } });
    expect(next).not.toHaveProperty("image");
    expect(next.setup).toBe("make");
    expect(next.egressAllow).toEqual([]);
    expect(next.requirements).toEqual({ capabilities: ["gpu"], minCpuMillis: 500, minMemoryBytes: 1024, minDiskBytes: 0 });
  });
});

describe("untilSession", () => {
  it("decodes every revision through the Session schema: a record the contract refuses fails the wait", async () => {
    const server = await startNatsServer();
    const nc = await connect({ servers: server.url });
    try {
      const kv = await new Kvm(nc).create("sessions");
      await kv.put("ws1.s1", JSON.stringify(makeSession({ id: "s1", workspaceId: "ws1", state: "queued" })));
      expect((await untilSession(nc, "s1", (s) => s.state === "queued")).workspaceId).toBe("ws1");
      const waiting = untilSession(nc, "s1", (s) => s.state === "running");
      await kv.put("ws1.s1", JSON.stringify({ ...makeSession({ id: "s1", workspaceId: "ws1" }), state: "asleep" }));
      await expect(waiting).rejects.toThrow(/state/);
    } finally {
      await nc.close();
      await server.stop();
    }
  });
});
