/**
 * Test harness for the scheduler: a real nats-server, real schedulers built
 * with createScheduler (several replicas when asked), a controllable clock,
 * and a stand-in for the runner side of the protocol (registration, dispatch
 * inbox, facts), which is what the scheduler talks to.
 */
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Registry } from "prom-client";
import { afterAll, afterEach, beforeAll } from "vitest";
import {
  Api,
  DispatchCommand,
  FleetRpc,
  RegisterRunnerReply,
  RegisterRunnerRequest,
  Runner,
  RunnerFact,
  Session,
  Streams,
  Subjects,
  type Scope,
} from "@paddock/contracts";
import { tokenKey } from "@paddock/contracts/token-key";
import { callRpc, createBusMetrics, decodeJson, encodeJson, provision } from "@paddock/bus";
import { silentLogger } from "@paddock/logging";
import { startNatsServer, untilSession, type NatsServerHandle } from "@paddock/testing";
import { loadConfig } from "../config.ts";
import { createSchedulerMetrics } from "../metrics.ts";
import { createScheduler, type Scheduler } from "../scheduler.ts";
import { RUNNER_FACTS_CONSUMER } from "../state/fact-backlog.ts";

export const alice: Scope = { workspaceId: "ws1", actor: { id: "alice", kind: "user" } };
export const mallory: Scope = { workspaceId: "ws2", actor: { id: "mallory", kind: "user" } };

/** A clock tests move by hand; every scheduler of a harness shares it. */
/** A well-formed seal key for facts that report a sealed checkpoint. */
export const testSealKey = Buffer.alloc(32, 7).toString("base64");

export class TestClock {
  constructor(public ms = 1_000_000) {}
  now = (): number => (this.ms += 1);
  advance(byMs: number): void {
    this.ms += byMs;
  }
}

export interface SchedulerHarness {
  nc: NatsConnection;
  clock: TestClock;
  schedulers: Scheduler[];
  start(env?: Record<string, string>): Promise<Scheduler>;
  /** The metrics registry a started scheduler counts into. */
  registryOf(s: Scheduler): Registry;
  /** Stops the schedulers and empties every stream the scheduler reads. */
  reset(): Promise<void>;
  close(): Promise<void>;
}

let idCounter = 0;

export async function startHarness(): Promise<SchedulerHarness> {
  const server: NatsServerHandle = await startNatsServer();
  const nc = await connect({ servers: server.url });
  await provision(nc, { replicas: 1 });
  const clock = new TestClock();
  const schedulers: Scheduler[] = [];
  const registries = new WeakMap<Scheduler, Registry>();
  return {
    nc,
    clock,
    schedulers,
    start: async (env = {}) => {
      const registry = new Registry();
      const s = await createScheduler({
        nc,
        config: loadConfig({ PADDOCK_SCHEDULER_TICK_MS: "3600000", PADDOCK_SESSION_TOKEN_SECRET: "test-secret-0123456789", ...env }),
        log: silentLogger(),
        bus: createBusMetrics(registry),
        metrics: createSchedulerMetrics(registry),
        registry,
        now: clock.now,
        newId: (prefix) => `${prefix}_${(idCounter += 1).toString(36).padStart(6, "0")}`,
      }).start();
      schedulers.push(s);
      registries.set(s, registry);
      return s;
    },
    registryOf: (s) => {
      const registry = registries.get(s);
      if (!registry) throw new Error("not a scheduler this harness started");
      return registry;
    },
    reset: async () => {
      for (const s of schedulers.splice(0)) await s.stop();
      const jsm = await jetstreamManager(nc);
      for (const name of ["KV_sessions", "KV_runners", "KV_names", "KV_idempotency", "KV_tokens", "KV_environments", "KV_seal-keys", Streams.runner, Streams.dispatch]) {
        await jsm.streams.purge(name);
      }
    },
    close: async () => {
      for (const s of schedulers.splice(0)) await s.stop();
      await nc.drain();
      await server.stop();
    },
  };
}

/** Registers a runner and puts its lease (renewed by nobody: it stays until the test deletes it). */
/**
 * One harness for the calling test file: started before its first test, reset
 * after each, closed after the last. `set` receives it once started.
 */
export function useHarness(set: (h: SchedulerHarness) => void): void {
  let harness: SchedulerHarness | undefined;
  beforeAll(async () => set((harness = await startHarness())));
  afterEach(async () => harness?.reset());
  afterAll(async () => harness?.close());
}

export async function register(nc: NatsConnection, req: Partial<RegisterRunnerRequest> & { runnerId: string; generation: number }) {
  const full: RegisterRunnerRequest = { poolId: "default", capacityTotal: 1, capabilities: [], sessions: [], ...req };
  const leases = await new Kvm(nc).open("runner-leases");
  await leases.put(`${full.poolId}.${full.runnerId}`, JSON.stringify({ runnerId: full.runnerId, poolId: full.poolId, generation: full.generation, renewedAt: 1 }));
  const reply = await nc.request(Subjects.register(full.poolId, full.runnerId), encodeJson(RegisterRunnerRequest, full), { timeout: 5_000 });
  const decoded = decodeJson(RegisterRunnerReply, reply.data);
  if (!decoded.ok) throw new Error(decoded.reason);
  return decoded.value;
}

/** A consumer of one runner's dispatch subject, as the runner-agent creates it. */
export async function dispatchInbox(nc: NatsConnection, runnerId: string, poolId = "default") {
  const jsm = await jetstreamManager(nc);
  const name = `test-${runnerId}-${(idCounter += 1)}`;
  await jsm.consumers.add(Streams.dispatch, {
    durable_name: name,
    filter_subject: Subjects.dispatch(poolId, runnerId),
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
  });
  const consumer = await jetstream(nc).consumers.get(Streams.dispatch, name);
  return {
    next: async (): Promise<DispatchCommand> => {
      const msg = await consumer.next({ expires: 10_000 });
      if (!msg) throw new Error("no dispatch arrived");
      msg.ack();
      const decoded = decodeJson(DispatchCommand, msg.data);
      if (!decoded.ok) throw new Error(decoded.reason);
      return decoded.value;
    },
    /** Commands sent to the runner and not yet taken by next(). */
    remaining: async (): Promise<number> => (await consumer.info()).num_pending,
  };
}

export function create(nc: NatsConnection, scope: Scope, body: Record<string, unknown> = {}) {
  return callRpc(nc, Api.createSession, { scope, body: { spec: { cmd: ["true"] }, ...body } });
}

export async function get(nc: NatsConnection, scope: Scope, id: string): Promise<Session> {
  return (await callRpc(nc, Api.getSession, { scope, sessionId: id })).session;
}

/** Resolves once a token's record is gone (revoked), watching its key. */
export async function tokenRevoked(nc: NatsConnection, token: string): Promise<void> {
  const tokens = await new Kvm(nc).open("tokens");
  const watch = await tokens.watch({ key: tokenKey(token) });
  for await (const e of watch) {
    if (e.operation !== "PUT") break;
  }
  watch.stop();
}

/** Every stored revision of a session's record, oldest first (the bucket keeps its history). */
export async function revisionsOf(nc: NatsConnection, id: string): Promise<Session[]> {
  const kv = await new Kvm(nc).open("sessions");
  const out: Session[] = [];
  for await (const e of await kv.history({ key: `*.${id}` })) if (e.operation === "PUT") out.push(Session.parse(e.json()));
  return out;
}

/** Resolves when the session's record reaches `state` (untilSession: a KV watch, each revision decoded by the schema). */
export function waitForState(nc: NatsConnection, id: string, state: string): Promise<Session> {
  return untilSession(nc, id, (s) => s.state === state);
}

export async function publishFact(nc: NatsConnection, fact: RunnerFact): Promise<void> {
  await jetstream(nc).publish(Subjects.runnerEvents(fact.poolId, fact.runnerId), encodeJson(RunnerFact, fact));
}

/**
 * Resolves once the schedulers' facts consumer has settled every fact
 * published so far (consumer info has no watch, so it is read again until then).
 */
export async function factsSettled(nc: NatsConnection): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const last = (await jsm.streams.info(Streams.runner)).state.last_seq;
  for (let i = 0; i < 500; i++) {
    const info = await jsm.consumers.info(Streams.runner, RUNNER_FACTS_CONSUMER);
    if (info.ack_floor.stream_seq >= last) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`facts up to ${last} never settled`);
}

type FactBody = RunnerFact extends infer F ? (F extends unknown ? Omit<F, "runnerId" | "poolId" | "runnerGeneration" | "sessionId" | "workspaceId" | "placementGeneration" | "at"> : never) : never;

/** A fact about the sandbox a dispatch command started, fenced with that command's generations. */
export function factFor(runnerId: string, cmd: DispatchCommand, body: FactBody, overrides: Partial<RunnerFact> = {}): RunnerFact {
  return {
    runnerId,
    poolId: "default",
    runnerGeneration: cmd.runnerGeneration,
    sessionId: cmd.sessionId,
    workspaceId: cmd.workspaceId,
    placementGeneration: cmd.placementGeneration,
    at: 5,
    ...body,
    ...overrides,
  } as RunnerFact;
}

/** Creates a session on a registered runner and brings it to running; returns its start command. */
export async function runningSession(nc: NatsConnection, runnerId: string, inbox: Awaited<ReturnType<typeof dispatchInbox>>, body: Record<string, unknown> = {}) {
  const { session } = await create(nc, alice, body);
  const start = await inbox.next();
  if (start.sessionId !== session.id) throw new Error("dispatch for another session");
  await publishFact(nc, factFor(runnerId, start, { type: "running" }));
  return { session: await waitForState(nc, session.id, "running"), start };
}

/** Resolves once the runner record shows `used` slots taken (watching the KV, no polling). */
export async function waitForCapacityUsed(nc: NatsConnection, runnerId: string, used: number, poolId = "default"): Promise<void> {
  const kv = await new Kvm(nc).open("runners");
  const watch = await kv.watch({ key: `${poolId}.${runnerId}` });
  for await (const e of watch) {
    if (e.operation === "PUT" && Runner.parse(e.json()).capacityUsed === used) break;
  }
  watch.stop();
}

/** A started session's service token, asked for as its runner does at boot (DISPATCH never carries it). */
export async function serviceTokenOf(nc: NatsConnection, start: DispatchCommand, runnerId: string, poolId = "default"): Promise<string> {
  const reply = await callRpc(nc, FleetRpc.sessionSecrets, {
    poolId,
    runnerId,
    workspaceId: start.workspaceId,
    sessionId: start.sessionId,
    placementGeneration: start.placementGeneration,
    names: [],
    token: true,
  });
  if (reply.sessionToken === undefined) throw new Error("no session token answered");
  return reply.sessionToken;
}
