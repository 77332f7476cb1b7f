import { existsSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm, type KvEntry } from "@nats-io/kv";
import { connect, headers as natsHeaders, type NatsConnection } from "@nats-io/transport-node";
import { Buckets, DispatchCommand, Headers, InputKind, Runner, RunnerLease, runnerKey, Streams, Subjects, type PortableSpec } from "@paddock/contracts";
import { decodeJson, encodeJson, provision } from "@paddock/bus";
import { silentLogger } from "@paddock/logging";
import { startNatsServer, startService, type NatsServerHandle } from "@paddock/testing";
import { fenceReason, type RegisteredEvent } from "../agent.ts";
import { loadConfig } from "../config.ts";
import { ConfigError } from "@paddock/config";
import {
  Collector,
  collectFacts,
  collectTerm,
  counterValue,
  dispatchTo,
  eventually,
  fakeScheduler,
  markLost,
  testAgent,
  hostPidOf,
  type TestAgent,
} from "../testing/test-support.ts";

const running: TestAgent[] = [];
let sessionCounter = 0;
const nextSessionId = () => `live${++sessionCounter}`;

function startCmd(t: TestAgent, sessionId: string, spec: PortableSpec, runnerGeneration = t.agent.generation): DispatchCommand {
  return { type: "start", sessionId, workspaceId: "ws1", runnerGeneration, placementGeneration: 1, spec, mode: "run", trigger: "initial" };
}

/** A long-running app that writes its pid into the workspace, so the test can watch its host pid in /proc. */
const sleeper: PortableSpec = { cmd: ["sh", "-c", "echo $$ > pid; printf up; exec sleep 600"] };

async function pidOf(t: TestAgent, sessionId: string, term: ReturnType<typeof collectTerm>): Promise<number> {
  await term.waitFor(() => term.text().includes("up"));
  return hostPidOf(t, sessionId, Number(readFileSync(join(t.config.dataDir, "sessions", sessionId, "workspace", "pid"), "utf8").trim()));
}

/** Entries of one KV key, as a collector (the watch delivers the current value first). */
async function watchKey(nc: NatsConnection, bucket: string, key: string): Promise<{ entries: Collector<KvEntry>; stop(): void }> {
  const kv = await new Kvm(nc).open(bucket);
  const watch = await kv.watch({ key });
  const entries = new Collector<KvEntry>();
  void (async () => {
    for await (const e of watch) entries.push(e);
  })();
  return { entries, stop: () => watch.stop() };
}

describe("config", () => {
  it("reads the lease TTL and resources, and refuses a renewal interval not below the TTL", () => {
    const c = loadConfig({ PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x", PADDOCK_RUNNER_CPU_MILLIS: "1500", PADDOCK_RUNNER_DISK_BYTES: "4096" });
    expect(c).toMatchObject({ leaseRenewMs: 2_000, leaseTtlMs: 10_000, cpuMillis: 1_500, diskBytes: 4_096 });
    expect(c.memoryBytes).toBeGreaterThan(0);
    expect(loadConfig({ PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x" }).diskBytes).toBeUndefined();
    expect(loadConfig({ PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x" }).heldCheckMs).toBe(30_000);
    expect(loadConfig({ PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x", PADDOCK_RUNNER_HELD_CHECK_MS: "0" }).heldCheckMs).toBe(0);
    for (const bad of ["-1", "1.5", "soon", "3600001"]) {
      expect(() => loadConfig({ PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x", PADDOCK_RUNNER_HELD_CHECK_MS: bad })).toThrow(ConfigError);
    }
    expect(() => loadConfig({ PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x", PADDOCK_RUNNER_LEASE_RENEW_MS: "10000" })).toThrow(ConfigError);
    expect(() => loadConfig({ PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x", PADDOCK_RUNNER_LEASE_TTL_MS: "500", PADDOCK_RUNNER_LEASE_RENEW_MS: "100" })).toThrow(ConfigError);
  });
});

describe("fenceReason", () => {
  it("is missing without a record, lost when marked lost, generation when it moved, else nothing", () => {
    const log = silentLogger();
    const record: Runner = { id: "r1", poolId: "p", state: "active", generation: 3, capacityUsed: 0, capacityTotal: 1, capabilities: [], registeredAt: 1, lastSeenAt: 1 };
    const entry = (r: Runner, operation: KvEntry["operation"] = "PUT") => ({ operation, value: encodeJson(Runner, r) }) as unknown as KvEntry;
    expect(fenceReason(null, 3, log)).toBe("missing");
    expect(fenceReason(entry(record, "DEL"), 3, log)).toBe("missing");
    expect(fenceReason(entry({ ...record, state: "lost", lostReason: "lease expired" }), 3, log)).toBe("lost");
    expect(fenceReason(entry({ ...record, generation: 4 }), 3, log)).toBe("generation");
    expect(fenceReason(entry({ ...record, state: "draining" }), 3, log)).toBeUndefined();
    expect(fenceReason({ operation: "PUT", value: new TextEncoder().encode("{") } as unknown as KvEntry, 3, log)).toBeUndefined();
  });
});

describe("liveness", () => {
  let server: NatsServerHandle;
  let nc: NatsConnection;

  beforeAll(async () => {
    server = await startNatsServer();
    nc = await connect({ servers: server.url });
    await provision(nc, { replicas: 1, leaseMarkerTtlMs: 1_000 });
  });
  afterAll(async () => {
    for (const t of running) await t.agent.stop();
    await nc.drain();
    await server.stop();
  });

  it("renews the lease with a TTL; once renewals stop the server removes the key", async () => {
    const scheduler = fakeScheduler(nc, 0);
    const t = testAgent(nc, { leaseRenewMs: 100, leaseTtlMs: 2_000 });
    running.push(t);
    const lease = await watchKey(nc, Buckets.runnerLeases, runnerKey(t.config.poolId, t.config.runnerId));
    await t.agent.start();
    // Thirty renewals 100 ms apart outlive one 2 s TTL: renewing keeps the key alive.
    await lease.entries.waitFor(() => lease.entries.items.filter((e) => e.operation === "PUT").length >= 30);
    expect(lease.entries.items.every((e) => e.operation === "PUT")).toBe(true);
    const last = decodeJson(RunnerLease, lease.entries.items.at(-1)!.value);
    expect(last).toEqual({ ok: true, value: { runnerId: t.config.runnerId, poolId: "default", generation: 1, renewedAt: 1_700_000_000_000 } });
    await t.agent.testing.stopLease();
    const gone = await lease.entries.waitFor((e) => e.operation !== "PUT");
    expect(["DEL", "PURGE"]).toContain(gone.operation);
    const kv = await new Kvm(nc).open(Buckets.runnerLeases);
    expect(await kv.get(runnerKey(t.config.poolId, t.config.runnerId))).toSatisfy((e: KvEntry | null) => e === null || e.operation !== "PUT");
    lease.stop();
    scheduler.sub.unsubscribe();
  });

  it("reports resources and capabilities when it registers", async () => {
    const scheduler = fakeScheduler(nc, 0);
    const t = testAgent(nc, { capabilities: ["process", "gpu"] });
    running.push(t);
    await t.agent.start();
    scheduler.sub.unsubscribe();
    const req = scheduler.requests.items[0]!;
    // The configured ones first, then the sandbox's: its backend and the kinds of limit it enforces.
    expect(req.capabilities.slice(0, 3)).toEqual(["process", "gpu", "sandbox:bwrap"]);
    expect(req.capabilities).toContain("limits:rlimit");
    expect(req.resources).toMatchObject({ cpuMillis: 2_000, memoryBytes: 1 << 30 });
    expect(req.resources!.diskBytes).toBeGreaterThan(0);
  });

  describe("fenced by the scheduler", () => {
    let scheduler: ReturnType<typeof fakeScheduler>;
    let t: TestAgent;
    let registered: Collector<RegisteredEvent>;
    let facts: ReturnType<typeof collectFacts>;

    beforeAll(async () => {
      scheduler = fakeScheduler(nc, 0);
      registered = new Collector<RegisteredEvent>();
      t = testAgent(nc, { leaseRenewMs: 50, leaseTtlMs: 10_000 }, silentLogger(), { onRegistered: (e) => registered.push(e) });
      running.push(t);
      facts = collectFacts(nc, t.config.poolId, t.config.runnerId);
      await t.agent.start();
    });
    afterAll(() => scheduler.sub.unsubscribe());

    it("marked lost: re-registers with its sessions, silently tears down those given away, keeps the rest under the new generation", async () => {
      const gone = nextSessionId();
      const kept = nextSessionId();
      const goneTerm = collectTerm(nc, gone, "main");
      const keptTerm = collectTerm(nc, kept, "main");
      const old = t.agent.generation;
      await dispatchTo(nc, t, startCmd(t, gone, sleeper));
      await dispatchTo(nc, t, startCmd(t, kept, sleeper));
      const gonePid = await pidOf(t, gone, goneTerm);
      const keptPid = await pidOf(t, kept, keptTerm);
      await facts.waitFor((f) => f.sessionId === kept && f.type === "running");
      await facts.waitFor((f) => f.sessionId === gone && f.type === "running");
      scheduler.destroy = [{ sessionId: gone, workspaceId: "ws1", placementGeneration: 1 }];

      await markLost(nc, t.config.poolId, t.config.runnerId);
      const event = await registered.waitFor((e) => e.reason === "lost");
      scheduler.destroy = [];

      const req = scheduler.requests.items.at(-1)!;
      expect(req.generation).toBe(old + 1);
      expect(req.sessions.map((s) => s.sessionId).sort()).toEqual([gone, kept].sort());
      expect(event).toMatchObject({ generation: old + 1, destroyed: [{ sessionId: gone }] });
      expect(t.agent.generation).toBe(old + 1);
      expect(readFileSync(join(t.config.dataDir, "generation"), "utf8").trim()).toBe(String(old + 1));

      await eventually(() => !existsSync(`/proc/${gonePid}`), `pid ${gonePid} gone`);
      expect(existsSync(`/proc/${keptPid}`)).toBe(true);
      expect(existsSync(join(t.config.dataDir, "sessions", gone))).toBe(false);
      expect(t.agent.sessions.held().map((h) => h.sessionId)).toEqual([kept]);

      // The kept session's later facts carry the new generation.
      await dispatchTo(nc, t, { type: "restart_app", sessionId: kept, workspaceId: "ws1", runnerGeneration: old + 1, placementGeneration: 1, requestId: "rq1", app: "main", trigger: "manual" });
      const restarted = await facts.waitFor((f) => f.sessionId === kept && f.type === "app" && f.run.generation === 2 && f.run.phase === "running");
      expect(restarted.runnerGeneration).toBe(old + 1);

      // Nothing about the torn-down session: no exit marker at the end of its log, no exited or completed facts.
      const jsm = await jetstreamManager(nc);
      const lastTerm = await jsm.streams.getMessage(Streams.term, { last_by_subj: Subjects.termOfApp(gone, "main") });
      expect(lastTerm?.header.has(Headers.exitCode) ?? false).toBe(false);
      expect(goneTerm.items.some((m) => m.exitCode !== undefined)).toBe(false);
      const aboutGone = facts.items.filter((f) => f.sessionId === gone);
      expect(aboutGone.some((f) => f.type === "exited" || f.type === "destroyed" || (f.type === "app" && f.run.phase !== "running"))).toBe(false);
      expect(aboutGone.every((f) => f.runnerGeneration === old)).toBe(true);
    });

    it("ignores dispatch of the old generation after re-registering", async () => {
      const old = t.agent.generation;
      await markLost(nc, t.config.poolId, t.config.runnerId);
      await registered.waitFor((e) => e.reason === "lost" && e.generation === old + 1);
      const staleBefore = await counterValue(t.metrics.staleDispatch);
      const stale = nextSessionId();
      await dispatchTo(nc, t, startCmd(t, stale, { cmd: ["true"] }, old));
      const probe = nextSessionId();
      await dispatchTo(nc, t, startCmd(t, probe, { cmd: ["true"] }, old + 1));
      await facts.waitFor((f) => f.sessionId === probe && f.type === "running");
      expect(facts.items.some((f) => f.sessionId === stale)).toBe(false);
      expect((await counterValue(t.metrics.staleDispatch)) - staleBefore).toBe(1);
    });

    it("claims past the authoritative generation when its record moved on", async () => {
      const old = t.agent.generation;
      // Someone registered this runner id far ahead (the record and the scheduler's stored generation agree).
      const kv = await new Kvm(nc).open(Buckets.runners);
      const key = runnerKey(t.config.poolId, t.config.runnerId);
      const entry = await kv.get(key);
      const record = decodeJson(Runner, entry!.value);
      if (!record.ok) throw new Error(record.reason);
      scheduler.stored = old + 5;
      await kv.put(key, encodeJson(Runner, { ...record.value, generation: old + 5 }));
      const event = await registered.waitFor((e) => e.reason === "generation" && e.generation > old);
      expect(event.generation).toBe(old + 6);
      expect(scheduler.requests.items.slice(-2).map((r) => r.generation)).toEqual([old + 1, old + 6]);
      expect(t.agent.fenced).toBe(false);
    });

    it("states exited again under the new generation for a kept session that ended under the old one", async () => {
      const sessionId = nextSessionId();
      await dispatchTo(nc, t, startCmd(t, sessionId, { cmd: ["sh", "-c", "exit 5"] }));
      const first = await facts.waitFor((f) => f.sessionId === sessionId && f.type === "exited");
      const old = t.agent.generation;
      expect(first.runnerGeneration).toBe(old);
      await markLost(nc, t.config.poolId, t.config.runnerId);
      await registered.waitFor((e) => e.reason === "lost" && e.generation === old + 1);
      const again = await facts.waitFor((f) => f.sessionId === sessionId && f.type === "exited" && f.runnerGeneration === old + 1);
      expect(again).toMatchObject({ exitCode: 5, placementGeneration: 1 });
    });

    it("states running again under the new generation when the start of a kept session is sent again", async () => {
      const live = nextSessionId();
      const ended = nextSessionId();
      await dispatchTo(nc, t, startCmd(t, live, { cmd: ["sleep", "600"] }));
      await dispatchTo(nc, t, startCmd(t, ended, { cmd: ["sh", "-c", "exit 3"] }));
      const old = t.agent.generation;
      await facts.waitFor((f) => f.sessionId === live && f.type === "running" && f.runnerGeneration === old);
      await facts.waitFor((f) => f.sessionId === ended && f.type === "exited" && f.runnerGeneration === old);
      await markLost(nc, t.config.poolId, t.config.runnerId);
      await registered.waitFor((e) => e.reason === "lost" && e.generation === old + 1);
      // The old-generation running facts are dropped by the fence; the record stays creating and the scheduler sends the start again.
      await dispatchTo(nc, t, startCmd(t, live, { cmd: ["sleep", "600"] }, old + 1));
      await dispatchTo(nc, t, startCmd(t, ended, { cmd: ["sh", "-c", "exit 3"] }, old + 1));
      const liveAgain = await facts.waitFor((f) => f.sessionId === live && f.type === "running" && f.runnerGeneration === old + 1);
      const endedAgain = await facts.waitFor((f) => f.sessionId === ended && f.type === "running" && f.runnerGeneration === old + 1);
      expect(liveAgain.placementGeneration).toBe(1);
      expect(endedAgain.placementGeneration).toBe(1);
      // Nothing was started twice: one process per session, one exit marker for the ended one.
      await dispatchTo(nc, t, startCmd(t, live, { cmd: ["sleep", "600"] }, old + 1));
      const probe = nextSessionId();
      await dispatchTo(nc, t, startCmd(t, probe, { cmd: ["true"] }, old + 1));
      await facts.waitFor((f) => f.sessionId === probe && f.type === "running");
      expect(facts.items.filter((f) => f.sessionId === live && f.type === "running")).toHaveLength(2);
      expect(facts.items.filter((f) => f.sessionId === ended && f.type === "app" && f.run.phase === "running")).toHaveLength(1);
    });

    it("states a warm suspend or resume again under the new generation where the kept record says otherwise", async () => {
      const [frozen, resumed, matching] = [nextSessionId(), nextSessionId(), nextSessionId()];
      for (const id of [frozen, resumed, matching]) await dispatchTo(nc, t, startCmd(t, id, { cmd: ["sleep", "600"] }));
      for (const id of [frozen, resumed, matching]) await facts.waitFor((f) => f.sessionId === id && f.type === "running");
      const old = t.agent.generation;
      const command = (sessionId: string, type: "suspend" | "resume", requestId: string): DispatchCommand =>
        type === "suspend"
          ? { type, sessionId, workspaceId: "ws1", runnerGeneration: old, placementGeneration: 1, requestId, warm: true }
          : { type, sessionId, workspaceId: "ws1", runnerGeneration: old, placementGeneration: 1, requestId };
      await dispatchTo(nc, t, command(frozen, "suspend", "q1"));
      await dispatchTo(nc, t, command(resumed, "suspend", "q2"));
      await facts.waitFor((f) => f.sessionId === resumed && f.type === "suspended");
      await dispatchTo(nc, t, command(resumed, "resume", "q3"));
      await facts.waitFor((f) => f.sessionId === frozen && f.type === "suspended");
      await facts.waitFor((f) => f.sessionId === resumed && f.type === "resumed");
      // The records missed those facts (dropped by the fence): one still says running, one suspended.
      scheduler.kept = () => [
        { sessionId: frozen, placementGeneration: 1, state: "running" },
        { sessionId: resumed, placementGeneration: 1, state: "suspended_warm" },
        { sessionId: matching, placementGeneration: 1, state: "running" },
      ];
      try {
        await markLost(nc, t.config.poolId, t.config.runnerId);
        await registered.waitFor((e) => e.reason === "lost" && e.generation === old + 1);
        const suspendedAgain = await facts.waitFor((f) => f.sessionId === frozen && f.type === "suspended" && f.runnerGeneration === old + 1);
        expect(suspendedAgain).toMatchObject({ warm: true, placementGeneration: 1 });
        await facts.waitFor((f) => f.sessionId === resumed && f.type === "resumed" && f.runnerGeneration === old + 1);
        const probe = nextSessionId();
        await dispatchTo(nc, t, startCmd(t, probe, { cmd: ["true"] }, old + 1));
        await facts.waitFor((f) => f.sessionId === probe && f.type === "running");
        expect(facts.items.filter((f) => f.sessionId === matching && f.runnerGeneration === old + 1)).toEqual([]);
      } finally {
        scheduler.kept = () => undefined;
      }
    });

    it("lists a placement a cold suspend released when it re-registers, and states the suspend again where the record missed it", async () => {
      const sessionId = nextSessionId();
      await dispatchTo(nc, t, startCmd(t, sessionId, { cmd: ["sleep", "600"] }));
      await facts.waitFor((f) => f.sessionId === sessionId && f.type === "running");
      const old = t.agent.generation;
      await dispatchTo(nc, t, { type: "suspend", sessionId, workspaceId: "ws1", runnerGeneration: old, placementGeneration: 1, requestId: "c1", warm: false });
      const first = await facts.waitFor((f) => f.sessionId === sessionId && f.type === "suspended");
      if (first.type !== "suspended" || !first.checkpoint) throw new Error("a cold suspend reports its checkpoint");
      // Released once the fact is out: the runtime goes right after.
      await eventually(() => t.agent.sessions.get(sessionId) === undefined, "the runtime released");
      // The record missed the suspend (dropped by the fence): it still says running.
      scheduler.kept = (req) => req.sessions.flatMap((h) => (h.sessionId === sessionId ? [{ sessionId, placementGeneration: 1, state: "running" as const }] : []));
      try {
        await markLost(nc, t.config.poolId, t.config.runnerId);
        await registered.waitFor((e) => e.reason === "lost" && e.generation === old + 1);
        expect(scheduler.requests.items.at(-1)?.sessions.map((h) => h.sessionId)).toContain(sessionId);
        const again = await facts.waitFor((f) => f.sessionId === sessionId && f.type === "suspended" && f.runnerGeneration === old + 1);
        expect(again).toMatchObject({ warm: false, placementGeneration: 1, checkpoint: first.checkpoint, sealKey: first.sealKey });
      } finally {
        scheduler.kept = () => undefined;
      }
      // A registration whose reply no longer keeps it (the record has the fact) forgets it.
      scheduler.kept = () => [];
      try {
        await markLost(nc, t.config.poolId, t.config.runnerId);
        await registered.waitFor((e) => e.reason === "lost" && e.generation === old + 2);
        await markLost(nc, t.config.poolId, t.config.runnerId);
        await registered.waitFor((e) => e.reason === "lost" && e.generation === old + 3);
      } finally {
        scheduler.kept = () => undefined;
      }
      expect(scheduler.requests.items.at(-1)?.sessions.map((h) => h.sessionId)).not.toContain(sessionId);
    });

    it("does not state running again after a re-registration unless the start is sent again", async () => {
      const sessionId = nextSessionId();
      await dispatchTo(nc, t, startCmd(t, sessionId, { cmd: ["sleep", "600"] }));
      const old = t.agent.generation;
      await facts.waitFor((f) => f.sessionId === sessionId && f.type === "running" && f.runnerGeneration === old);
      await markLost(nc, t.config.poolId, t.config.runnerId);
      await registered.waitFor((e) => e.reason === "lost" && e.generation === old + 1);
      const probe = nextSessionId();
      await dispatchTo(nc, t, startCmd(t, probe, { cmd: ["true"] }, old + 1));
      await facts.waitFor((f) => f.sessionId === probe && f.type === "running");
      expect(facts.items.filter((f) => f.sessionId === sessionId && f.type === "running")).toHaveLength(1);
    });
  });
});

describe("reconnect", () => {
  it("re-registers after the NATS server restarts, keeping its sessions", async () => {
    let server = await startNatsServer();
    const { port, storeDir } = server;
    const opts = { servers: server.url, maxReconnectAttempts: -1, reconnectTimeWait: 50 };
    const nc = await connect(opts);
    const agentNc = await connect(opts);
    await provision(nc, { replicas: 1 });
    const scheduler = fakeScheduler(nc, 0);
    const registered = new Collector<RegisteredEvent>();
    const t = testAgent(agentNc, {}, silentLogger(), { onRegistered: (e) => registered.push(e) });
    const facts = collectFacts(nc, t.config.poolId, t.config.runnerId);
    await t.agent.start();
    const sessionId = nextSessionId();
    const term = collectTerm(nc, sessionId, "main");
    await dispatchTo(nc, t, startCmd(t, sessionId, sleeper));
    const pid = await pidOf(t, sessionId, term);
    await facts.waitFor((f) => f.sessionId === sessionId && f.type === "running");

    await server.kill();
    server = await startNatsServer({ port, storeDir });
    const event = await registered.waitFor((e) => e.reason === "reconnect");
    expect(event.generation).toBe(2);
    const req = scheduler.requests.items.at(-1)!;
    expect(req).toMatchObject({ generation: 2, sessions: [{ sessionId, placementGeneration: 1 }] });
    expect(existsSync(`/proc/${pid}`)).toBe(true);

    // Dispatch under the new generation reaches it over the restarted server.
    const probe = nextSessionId();
    await dispatchTo(nc, t, startCmd(t, probe, { cmd: ["true"] }, 2));
    const probeRunning = await facts.waitFor((f) => f.sessionId === probe && f.type === "running");
    expect(probeRunning.runnerGeneration).toBe(2);

    await t.agent.stop();
    scheduler.sub.unsubscribe();
    await agentNc.drain();
    await nc.drain();
    await server.stop();
  });
});

/** The process and every descendant (tsx runs the service in a child node process). */
function processTree(pid: number): number[] {
  const children = readdirSync(`/proc/${pid}/task`).flatMap((tid) => {
    try {
      return readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
    } catch {
      return [];
    }
  });
  return [pid, ...children.flatMap(processTree)];
}

describe("a stopped process", () => {
  it("loses its lease while SIGSTOPped and re-registers after SIGCONT once the scheduler marked it lost; input typed meanwhile never reaches the old copy", async () => {
    const server = await startNatsServer();
    const nc = await connect({ servers: server.url });
    await provision(nc, { replicas: 1, leaseMarkerTtlMs: 1_000 });
    const scheduler = fakeScheduler(nc, 0);
    // A runner process asks for its session's secrets and token at every boot: none here.
    scheduler.boot = () => ({ secrets: [] });
    const runnerId = "stopped1";
    const lease = await watchKey(nc, Buckets.runnerLeases, runnerKey("default", runnerId));
    const svc = await startService("runner-agent", {
      PADDOCK_NATS_URL: server.url,
      PADDOCK_RUNNER_ID: runnerId,
      PADDOCK_RUNNER_DATA_DIR: mkdtempSync(join(tmpdir(), "paddock-runner-stop-")),
      PADDOCK_RUNNER_LEASE_RENEW_MS: "200",
      PADDOCK_RUNNER_LEASE_TTL_MS: "1000",
    });
    expect(svc.ready).toMatchObject({ generation: 1 });
    await lease.entries.waitFor((e) => e.operation === "PUT");
    // A session the controller types into: `cat` echoes every line it gets.
    const sessionId = "typed1";
    const facts = collectFacts(nc, "default", runnerId);
    const term = collectTerm(nc, sessionId, "main");
    const held = { sessionId, workspaceId: "ws1", placementGeneration: 1 };
    await jetstream(nc).publish(
      Subjects.dispatch("default", runnerId),
      encodeJson(DispatchCommand, { type: "start", ...held, runnerGeneration: 1, spec: { cmd: ["cat"] }, mode: "run", trigger: "initial" }),
    );
    await facts.waitFor((f) => f.sessionId === sessionId && f.type === "running");
    const type = (text: string) => {
      const h = natsHeaders();
      h.set(Headers.inputKind, InputKind.data);
      h.set(Headers.controllerGeneration, "1");
      nc.publish(Subjects.input("default", runnerId, sessionId, "main"), `${text}\r`, { headers: h });
    };
    type("typed-before");
    await term.waitFor(() => term.text().includes("typed-before"));
    const tree = processTree(svc.process.pid!);
    for (const pid of tree) process.kill(pid, "SIGSTOP");
    await lease.entries.waitFor((e) => e.operation !== "PUT");
    // What the scheduler does on the delete marker: the runner is lost, the session goes elsewhere.
    await markLost(nc, "default", runnerId);
    scheduler.destroy = [held];
    // Typed by the (still current) controller while the runner is stopped: nats-server holds it for the runner.
    type("typed-while-stopped");
    await nc.flush();
    for (const pid of tree) process.kill(pid, "SIGCONT");
    const req = await scheduler.requests.waitFor((r) => r.generation === 2);
    expect(req.runnerId).toBe(runnerId);
    await svc.waitForLog((l) => l.msg === "registered" && l.generation === 2);
    // The old copy is torn down (silently: its log belongs to the successor), and it never got the keystrokes:
    // they arrived before a fence check confirmed the registration, so they were dropped and counted.
    await svc.waitForLog((l) => l.msg === "session discarded after re-registration" && l.sessionId === sessionId);
    expect(term.text()).not.toContain("typed-while-stopped");
    const metrics = await (await fetch(`http://127.0.0.1:${String(svc.ready.opsPort)}/metrics`)).text();
    expect(Number(/^paddock_stale_input_total (\d+)/m.exec(metrics)?.[1] ?? 0)).toBeGreaterThanOrEqual(1);
    const renewed = await lease.entries.waitFor((e) => e.operation === "PUT" && decodeJson(RunnerLease, e.value).ok && (decodeJson(RunnerLease, e.value) as { value: RunnerLease }).value.generation === 2);
    expect(renewed.key).toBe(runnerKey("default", runnerId));
    expect(await svc.stop()).toBe(0);
    lease.stop();
    scheduler.sub.unsubscribe();
    await nc.drain();
    await server.stop();
  });
});
