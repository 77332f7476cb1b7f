import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { Buckets, DispatchCommand, Headers, RunnerLease, Subjects, runnerKey, type PortableSpec } from "@paddock/contracts";
import { decodeJson, encodeJson, provision } from "@paddock/bus";
import { useNatsServer } from "@paddock/testing/vitest";
import { dispatchConsumerName } from "./fleet/dispatch-consumer.ts";
import { collectFacts, collectTerm, counterValue, fakeScheduler, testAgent, type TestAgent } from "./testing/test-support.ts";

const nats = useNatsServer();
const running: TestAgent[] = [];

beforeAll(() => provision(nats.nc, { replicas: 1 }));
// Before the server stops: after-all hooks run last-registered first.
afterAll(async () => {
  for (const t of running) await t.agent.stop();
});

let sessionCounter = 0;
function nextSessionId(): string {
  sessionCounter += 1;
  return `s${sessionCounter}`;
}

async function dispatch(t: TestAgent, cmd: DispatchCommand): Promise<void> {
  await jetstream(nats.nc).publish(Subjects.dispatch(t.config.poolId, t.config.runnerId), encodeJson(DispatchCommand, cmd));
}

function startCmd(t: TestAgent, sessionId: string, spec: PortableSpec, placementGeneration = 1): DispatchCommand {
  return { type: "start", sessionId, workspaceId: "ws1", runnerGeneration: t.agent.generation, placementGeneration, spec, mode: "run", trigger: "initial" };
}

function sendInput(t: TestAgent, sessionId: string, app: string, kind: string | undefined, generation: string | undefined, body: Uint8Array | string = "") {
  const h = natsHeaders();
  if (kind !== undefined) h.set(Headers.inputKind, kind);
  if (generation !== undefined) h.set(Headers.controllerGeneration, generation);
  nats.nc.publish(Subjects.input(t.config.poolId, t.config.runnerId, sessionId, app), body, { headers: h });
}

describe("registration", () => {
  it("claims the persisted generation plus one, persists the grant and renews its lease", async () => {
    const scheduler = fakeScheduler(nats.nc, 0);
    const t = testAgent(nats.nc);
    running.push(t);
    writeFileSync(join(t.config.dataDir, "generation"), "4\n");
    await t.agent.start();
    scheduler.sub.unsubscribe();
    expect(scheduler.requests.items.map((r) => r.generation)).toEqual([5]);
    expect(scheduler.requests.items[0]).toMatchObject({ runnerId: t.config.runnerId, capacityTotal: 8, sessions: [] });
    expect(scheduler.requests.items[0]!.capabilities.slice(0, 2)).toEqual(["process", "sandbox:bwrap"]);
    expect(t.agent.generation).toBe(5);
    expect(readFileSync(join(t.config.dataDir, "generation"), "utf8").trim()).toBe("5");
    const jsm = await jetstreamManager(nats.nc);
    const info = await jsm.consumers.info("DISPATCH", dispatchConsumerName("default", t.config.runnerId));
    expect(info.config.filter_subject).toBe(Subjects.dispatch("default", t.config.runnerId));
    // Memory-backed: no state file rewritten per ack; made again from what was settled if a broker restart loses it.
    expect(info.config.mem_storage).toBe(true);
    const kv = await new Kvm(nats.nc).open(Buckets.runnerLeases);
    const entry = await kv.get(runnerKey("default", t.config.runnerId));
    const lease = decodeJson(RunnerLease, entry?.value ?? new Uint8Array());
    expect(lease).toEqual({ ok: true, value: { runnerId: t.config.runnerId, poolId: "default", generation: 5, renewedAt: 1_700_000_000_000 } });
  });

  it("re-claims past the stored generation after a refusal", async () => {
    const scheduler = fakeScheduler(nats.nc, 9);
    const t = testAgent(nats.nc);
    running.push(t);
    writeFileSync(join(t.config.dataDir, "generation"), "4\n");
    await t.agent.start();
    scheduler.sub.unsubscribe();
    expect(scheduler.requests.items.map((r) => r.generation)).toEqual([5, 10]);
    expect(t.agent.generation).toBe(10);
    expect(readFileSync(join(t.config.dataDir, "generation"), "utf8").trim()).toBe("10");
  });

  it("destroys the sessions the scheduler lists in its reply", async () => {
    const scheduler = fakeScheduler(nats.nc, 0);
    scheduler.destroy = [{ sessionId: "orphan1", workspaceId: "ws1", placementGeneration: 3 }];
    const t = testAgent(nats.nc);
    running.push(t);
    const facts = collectFacts(nats.nc, t.config.poolId, t.config.runnerId);
    await t.agent.start();
    scheduler.sub.unsubscribe();
    const destroyed = await facts.waitFor((f) => f.sessionId === "orphan1");
    expect(destroyed).toMatchObject({ type: "destroyed", placementGeneration: 3, runnerGeneration: 1 });
  });

  it("comes up when the scheduler starts after it", async () => {
    let firstSeen!: () => void;
    const seen = new Promise<void>((resolve) => (firstSeen = resolve));
    // A subscriber that never answers: the agent's request times out and is retried.
    const mute = nats.nc.subscribe(Subjects.registerAll, { callback: () => firstSeen() });
    const t = testAgent(nats.nc, { registerTimeoutMs: 100 });
    running.push(t);
    const starting = t.agent.start();
    await seen;
    mute.unsubscribe();
    const scheduler = fakeScheduler(nats.nc, 0);
    await starting;
    scheduler.sub.unsubscribe();
    expect(t.agent.generation).toBe(1);
  });
});

describe("sessions", () => {
  let t: TestAgent;
  let facts: ReturnType<typeof collectFacts>;

  beforeAll(async () => {
    const scheduler = fakeScheduler(nats.nc, 0);
    const pending = testAgent(nats.nc);
    facts = collectFacts(nats.nc, pending.config.poolId, pending.config.runnerId);
    running.push(pending);
    await pending.agent.start();
    scheduler.sub.unsubscribe();
    t = pending;
  });

  it("runs an app: running fact, output with its generation, exit marker, exited fact", async () => {
    const sessionId = nextSessionId();
    const term = collectTerm(nats.nc, sessionId, "main");
    await dispatch(t, startCmd(t, sessionId, { cmd: ["sh", "-c", "printf hello; exit 3"] }, 7));
    const runningFact = await facts.waitFor((f) => f.sessionId === sessionId && f.type === "running");
    expect(runningFact).toMatchObject({ runnerId: t.config.runnerId, poolId: "default", runnerGeneration: 1, workspaceId: "ws1", placementGeneration: 7, at: 1_700_000_000_000 });
    const exited = await facts.waitFor((f) => f.sessionId === sessionId && f.type === "exited");
    expect(exited).toMatchObject({ exitCode: 3, placementGeneration: 7 });
    const marker = await term.waitFor((m) => m.exitCode !== undefined);
    expect(marker.exitCode).toBe("3");
    expect(marker.body.byteLength).toBe(0);
    expect(term.items.at(-1)).toBe(marker);
    expect(term.text()).toContain("hello");
    expect(term.items.every((m) => m.generation === "7")).toBe(true);
    expect(existsSync(join(t.config.dataDir, "sessions", sessionId, "workspace"))).toBe(true);
  });

  it("is idempotent for a redelivered start of the same placement", async () => {
    const sessionId = nextSessionId();
    const term = collectTerm(nats.nc, sessionId, "main");
    const cmd = startCmd(t, sessionId, { cmd: ["sh", "-c", "printf once; exit 0"] });
    await dispatch(t, cmd);
    await dispatch(t, cmd);
    await facts.waitFor((f) => f.sessionId === sessionId && f.type === "exited");
    // A marker follows the command's output; a second run would add a second one.
    const probe = nextSessionId();
    await dispatch(t, startCmd(t, probe, { cmd: ["true"] }));
    await facts.waitFor((f) => f.sessionId === probe && f.type === "running");
    expect(term.items.filter((m) => m.exitCode !== undefined)).toHaveLength(1);
    // Under the generation it was stated in, running is not stated again.
    expect(facts.items.filter((f) => f.sessionId === sessionId && f.type === "running")).toHaveLength(1);
  });

  it("delivers input of the current controller generation and drops older ones", async () => {
    const sessionId = nextSessionId();
    const term = collectTerm(nats.nc, sessionId, "main");
    await dispatch(t, startCmd(t, sessionId, { cmd: ["cat"] }));
    await facts.waitFor((f) => f.sessionId === sessionId && f.type === "running");
    const staleBefore = await counterValue(t.metrics.staleInput);
    const invalidBefore = await counterValue(t.metrics.invalidMessages);
    sendInput(t, sessionId, "main", "claim", "2");
    sendInput(t, sessionId, "main", "data", "2", "ping-current\r");
    await term.waitFor(() => term.text().includes("ping-current"));
    sendInput(t, sessionId, "main", "data", "1", "ping-stale\r");
    // Malformed: no kind, no generation, bad resize, unknown app.
    sendInput(t, sessionId, "main", undefined, "2", "bad-kind\r");
    sendInput(t, sessionId, "main", "data", "x", "bad-gen\r");
    sendInput(t, sessionId, "main", "resize", "2", '{"cols":"wide"}');
    sendInput(t, sessionId, "nope", "data", "2", "bad-app\r");
    sendInput(t, sessionId, "main", "resize", "3", JSON.stringify({ cols: 100, rows: 30 }));
    sendInput(t, sessionId, "main", "data", "3", "ping-after\r");
    await term.waitFor(() => term.text().includes("ping-after"));
    const text = term.text();
    for (const dropped of ["ping-stale", "bad-kind", "bad-gen", "bad-app"]) expect(text).not.toContain(dropped);
    expect((await counterValue(t.metrics.staleInput)) - staleBefore).toBe(1);
    expect((await counterValue(t.metrics.invalidMessages)) - invalidBefore).toBe(4);

    await dispatch(t, { type: "destroy", sessionId, workspaceId: "ws1", runnerGeneration: t.agent.generation, placementGeneration: 1 });
    await facts.waitFor((f) => f.sessionId === sessionId && f.type === "destroyed");
    expect(existsSync(join(t.config.dataDir, "sessions", sessionId))).toBe(false);
    const marker = await term.waitFor((m) => m.exitCode !== undefined);
    expect(marker.exitCode).toBe(""); // killed by a signal
    expect(facts.items.some((f) => f.sessionId === sessionId && f.type === "exited")).toBe(false);
  });

  it("reports failed when a command cannot be spawned", async () => {
    const sessionId = nextSessionId();
    await dispatch(t, startCmd(t, sessionId, { cmd: ["/definitely/not/here"] }));
    const failed = await facts.waitFor((f) => f.sessionId === sessionId && (f.type === "failed" || f.type === "running"));
    expect(failed.type).toBe("failed");
    expect(failed.type === "failed" && failed.reason).toMatch(/command not found/);
    expect(existsSync(join(t.config.dataDir, "sessions", sessionId))).toBe(false);
  });

  it("ignores dispatch for another runner generation and survives malformed dispatch", async () => {
    const stale = nextSessionId();
    const staleBefore = await counterValue(t.metrics.staleDispatch);
    const invalidBefore = await counterValue(t.metrics.invalidMessages);
    await dispatch(t, { ...startCmd(t, stale, { cmd: ["true"] }), runnerGeneration: t.agent.generation + 5 });
    const js = jetstream(nats.nc);
    const subject = Subjects.dispatch(t.config.poolId, t.config.runnerId);
    await js.publish(subject, "not json");
    await js.publish(subject, JSON.stringify({ type: "start", sessionId: "x" }));
    const probe = nextSessionId();
    await dispatch(t, startCmd(t, probe, { cmd: ["true"] }));
    await facts.waitFor((f) => f.sessionId === probe && f.type === "running");
    expect(facts.items.some((f) => f.sessionId === stale)).toBe(false);
    expect((await counterValue(t.metrics.staleDispatch)) - staleBefore).toBe(1);
    expect((await counterValue(t.metrics.invalidMessages)) - invalidBefore).toBe(2);
  });

  it("runs every app of a session and reports the first app's exit code once all exited", async () => {
    const sessionId = nextSessionId();
    const second = collectTerm(nats.nc, sessionId, "helper");
    await dispatch(
      t,
      startCmd(t, sessionId, {
        apps: [
          { name: "main", cmd: ["sh", "-c", "exit 4"] },
          { name: "helper", cmd: ["sh", "-c", "printf helper; exit 9"] },
        ],
      }),
    );
    const exited = await facts.waitFor((f) => f.sessionId === sessionId && f.type === "exited");
    expect(exited).toMatchObject({ exitCode: 4 });
    expect((await second.waitFor((m) => m.exitCode !== undefined)).exitCode).toBe("9");
    expect(second.text()).toContain("helper");
  });
});

describe("shutdown", () => {
  it("kills its sessions, appends their exit markers and reports them exited by signal", async () => {
    const scheduler = fakeScheduler(nats.nc, 0);
    const t = testAgent(nats.nc);
    const facts = collectFacts(nats.nc, t.config.poolId, t.config.runnerId);
    await t.agent.start();
    scheduler.sub.unsubscribe();
    const sessionId = nextSessionId();
    const term = collectTerm(nats.nc, sessionId, "main");
    await dispatch(t, startCmd(t, sessionId, { cmd: ["sh", "-c", "printf up; exec sleep 600"] }));
    await facts.waitFor((f) => f.sessionId === sessionId && f.type === "running");
    await term.waitFor(() => term.text().includes("up"));
    await t.agent.stop();
    expect(t.agent.isReady()).toBe(false);
    const exited = await facts.waitFor((f) => f.sessionId === sessionId && f.type === "exited");
    expect(exited).toMatchObject({ exitCode: null, signal: "SIGTERM" });
    expect((await term.waitFor((m) => m.exitCode !== undefined)).exitCode).toBe("");
  });
});
