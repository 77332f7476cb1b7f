import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { Registry } from "prom-client";
import {
  Api,
  Buckets,
  RegisterRunnerReply,
  RegisterRunnerRequest,
  Runner,
  RunnerFact,
  Session,
  Streams,
  Subjects,
  type NewId,
  type Now,
} from "@paddock/contracts";
import { consumeTyped, decodeJson, encoderOf, NEVER_PARK, serveRpc, type BusMetrics, type ConsumerHandle } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { SchedulerConfig } from "./config.ts";
import type { SchedulerContext } from "./context.ts";
import type { SchedulerMetrics } from "./metrics.ts";
import { createSession } from "./api/create.ts";
import { applyRunnerFact } from "./facts/facts.ts";
import { registerRunner, registrationRefusal, setRunnerState } from "./fleet/runners.ts";
import { loseRunnerNow } from "./fleet/liveness.ts";
import { createPlacer, type Placer } from "./placement/placement.ts";
import { attachSession, deleteSession, getSession, listRunners, listSessions, previewTarget } from "./api/queries.ts";
import { RunnerRecords, SessionRecords } from "./state/store.ts";
import { KvView } from "./state/view.ts";
import { recordTransfer, recycleSession, restartApp, resumeSession, snapshotSession, suspendSession } from "./api/lifecycle.ts";
import { PresenceTracker } from "./state/presence.ts";
import { LeaseTracker } from "./state/lease-tracker.ts";
import { newSweepMemory, sweep } from "./policies/sweeper.ts";
import { createEndOfLife, type EndOfLife } from "./policies/end-of-life.ts";
import { SessionWaiters } from "./state/waiters.ts";
import { SessionIndex } from "./state/session-index.ts";
import { CoalescedReads } from "./state/coalesce.ts";
import { bootEnvironmentOf } from "./state/layering.ts";
import { serveRunnerRpc } from "./fleet/runner-rpc.ts";
import { SealKeys } from "./state/seal-keys.ts";
import { InFlight } from "./state/in-flight.ts";
import { createCheckpointGc, type CheckpointGcResult } from "./policies/checkpoint-gc.ts";
import { createFactBacklog, RUNNER_FACTS_CONSUMER } from "./state/fact-backlog.ts";
import { createEnvironmentStore, isDeleted } from "./state/environment-store.ts";
import { applyEnvSnapshotFact, createEnvironmentApi } from "./api/environments.ts";

/** Presence heartbeats older than this no longer count (gateways send every 5 s). */
const PRESENCE_STALE_MS = 15_000;

export interface SchedulerDeps {
  nc: NatsConnection;
  config: SchedulerConfig;
  log: Logger;
  bus: BusMetrics;
  metrics: SchedulerMetrics;
  registry: Registry;
  now: Now;
  newId: NewId;
}

export interface Scheduler {
  stop(): Promise<void>;
  /** One pass of the timeout and TTL policies (also run on every tick). */
  sweep(): Promise<void>;
  /** One pass of checkpoint object collection (also run every checkpointGcIntervalMs). */
  collectCheckpoints(): Promise<CheckpointGcResult>;
  /** For tests: the context the handlers share. */
  context: SchedulerContext;
  /** For tests: the end-of-life replay at start; resolves with how many sessions it redid. */
  replayed: Promise<number>;
}

function sessionOfFact(msg: JsMsg): string {
  try {
    return String((JSON.parse(new TextDecoder().decode(msg.data)) as { sessionId?: unknown }).sessionId ?? "");
  } catch {
    return "";
  }
}

/**
 * Facts one replica applies at once. Each is two round trips (an exact read of
 * the runner, a CAS on the session), so under load this bounds how fast
 * sessions reach running: 64 capped a 10,000-session run at ~400/s.
 */
const FACT_LANES = 256;
/** Beyond the longest wait an API call has for its runner (operationWaitMs): how long a stopping replica gives requests it took. */
const STOP_GRACE_MS = 2_000;


async function ensureFactsConsumer(nc: NatsConnection): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await jsm.consumers.add(Streams.runner, {
    durable_name: RUNNER_FACTS_CONSUMER,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: 30_000_000_000,
    max_deliver: -1,
  });
}

async function buildContext(deps: SchedulerDeps): Promise<{ ctx: SchedulerContext; placer: Placer; endOfLife: EndOfLife; replayed: Promise<number> }> {
  const kvm = new Kvm(deps.nc);
  const [sessionsKv, runnersKv, names, idempotency, tokens, leasesKv, sealKeysKv] = await Promise.all([
    kvm.open(Buckets.sessions),
    kvm.open(Buckets.runners),
    kvm.open(Buckets.names),
    kvm.open(Buckets.idempotency),
    kvm.open(Buckets.tokens),
    kvm.open(Buckets.runnerLeases),
    kvm.open(Buckets.sealKeys),
  ]);
  const envs = await createEnvironmentStore(deps.nc, { log: deps.log, registry: deps.registry });
  const encode = encoderOf(deps.nc);
  const sealKeys = new SealKeys(sealKeysKv, deps.now, encode);
  const sessionIndex = new SessionIndex();
  // Exact reads decide fences (a fact's runner generation, a placement check): from the leader.
  const jsm = await jetstreamManager(deps.nc);
  const runners = new RunnerRecords(runnersKv, Runner, encode, { jsm, bucket: Buckets.runners });
  // Made once the context exists; nothing ends a session before the views start below.
  let endOfLife: EndOfLife | undefined;
  const ctx = {
    ...deps,
    js: jetstream(deps.nc),
    sessions: new SessionRecords(sessionsKv, Session, encode, { jsm, bucket: Buckets.sessions }),
    runners,
    runnerReads: new CoalescedReads((key) => runners.get(key)),
    factBacklog: createFactBacklog(jsm),
    sessionView: new KvView(Session, sessionIndex.onEntry),
    sessionIndex,
    runnerView: new KvView(Runner),
    names,
    idempotency,
    envs,
    tokens,
    sealKeys,
    waiters: new SessionWaiters(),
    // Heartbeats come every few seconds; three missed ones mean nobody is attached.
    presence: new PresenceTracker(deps.now, PRESENCE_STALE_MS),
    leases: new LeaseTracker(deps.now),
    bootEnvironment: async (session) => {
      if (session.environmentId === undefined) return {};
      const env = await envs.find(session.workspaceId, session.environmentId);
      if (!env) return {};
      const environment = bootEnvironmentOf(env.value, session.spec);
      // A snapshot whose key is gone cannot be opened: boot by running setup instead.
      if (!environment.snapshot) return { environment };
      const snapshotKey = await sealKeys.get(environment.snapshot.ref);
      if (snapshotKey !== undefined) return { environment: { ...environment, snapshotKey } };
      const { snapshot: _unusable, ...withoutSnapshot } = environment;
      return { environment: withoutSnapshot };
    },
    applyEnvSnapshot: async (fact) => {
      // The key first: a snapshot recorded without its key could never be restored.
      await sealKeys.put(fact.checkpoint.ref, fact.sealKey);
      await applyEnvSnapshotFact(deps, envs, fact);
    },
    requestPlacement: () => {},
    placeOnWrite: ((): undefined => undefined) as SchedulerContext["placeOnWrite"],
    onTerminal: (session) => endOfLife?.run(session),
  } satisfies SchedulerContext;
  endOfLife = createEndOfLife(ctx);
  const placer = createPlacer(ctx);
  ctx.requestPlacement = placer.request;
  ctx.placeOnWrite = placer.placeOnWrite;
  // A session that becomes queued, or a runner that changes, may make a placement
  // possible; a request may be waiting for exactly this revision.
  await ctx.sessionView.start(deps.nc, sessionsKv, Buckets.sessions, deps.log, (key) => {
    ctx.requestPlacement();
    ctx.waiters.notify(key, ctx.sessionView.get(key)?.value);
  });
  await ctx.runnerView.start(deps.nc, runnersKv, Buckets.runners, deps.log, () => ctx.requestPlacement());
  // The fleet gauges on /metrics read the views at each scrape.
  deps.metrics.setFleetSource({
    sessions: () => [...ctx.sessionView.values()].map((v) => v.value),
    runners: () => [...ctx.runnerView.values()].map((v) => v.value),
  });
  await ctx.leases.start(leasesKv, deps.log);
  // The replica that ended one of these may have died before its end of life was done.
  const replayed = endOfLife.replayRecent();
  return { ctx, placer, endOfLife, replayed };
}

function serveApi(ctx: SchedulerContext, inFlight: InFlight): Subscription[] {
  const opts = { metrics: ctx.bus, log: ctx.log };
  return [
    serveRpc(ctx.nc, Api.createSession, inFlight.track((req) => createSession(ctx, req.scope, req.body)), opts),
    serveRpc(ctx.nc, Api.getSession, inFlight.track(async (req) => ({ session: (await getSession(ctx, req.scope, req.sessionId)).value })), opts),
    serveRpc(ctx.nc, Api.listSessions, inFlight.track(async (req) => listSessions(ctx, req)), opts),
    serveRpc(ctx.nc, Api.deleteSession, inFlight.track(async (req) => ({ session: await deleteSession(ctx, req.scope, req.sessionId) })), opts),
    serveRpc(ctx.nc, Api.attachSession, inFlight.track(async (req) => ({ session: await attachSession(ctx, req.scope, req.sessionId, req.mode) })), opts),
    serveRpc(ctx.nc, Api.listRunners, inFlight.track(async (req) => listRunners(ctx, req)), opts),
    serveRpc(ctx.nc, Api.setRunnerState, inFlight.track(async (req) => ({ runner: await setRunnerState(ctx, req.runnerId, req.state) })), opts),
    serveRpc(ctx.nc, Api.loseRunner, inFlight.track(async (req) => ({ lost: await loseRunnerNow(ctx, req.poolId, req.runnerId, req.reason) })), opts),
    serveRpc(ctx.nc, Api.suspendSession, inFlight.track(async (req) => ({ session: await suspendSession(ctx, req.scope, req.sessionId, req.warm) })), opts),
    serveRpc(ctx.nc, Api.resumeSession, inFlight.track(async (req) => ({ session: await resumeSession(ctx, req.scope, req.sessionId) })), opts),
    serveRpc(ctx.nc, Api.snapshotSession, inFlight.track((req) => snapshotSession(ctx, req.scope, req.sessionId)), opts),
    serveRpc(ctx.nc, Api.recycleSession, inFlight.track((req) => recycleSession(ctx, req.scope, req.sessionId)), opts),
    serveRpc(ctx.nc, Api.previewTarget, inFlight.track((req) => previewTarget(ctx, req.sessionId, req.port)), opts),
    serveRpc(ctx.nc, Api.recordTransfer, inFlight.track(async (req) => ({ session: await recordTransfer(ctx, req.scope, req.sessionId, req.direction) })), opts),
    serveRpc(ctx.nc, Api.restartApp, inFlight.track(async (req) => ({ session: await restartApp(ctx, req.scope, req.sessionId, req.app) })), opts),
  ];
}

/**
 * Registration answers with the bare reply (no envelope): a runner that gets
 * no answer, for any reason, simply retries.
 */
function serveRegistration(ctx: SchedulerContext): Subscription {
  return ctx.nc.subscribe(Subjects.registerAll, {
    queue: "scheduler",
    callback: (err, msg) => {
      if (err) return;
      const decoded = decodeJson(RegisterRunnerRequest, msg.data);
      if (!decoded.ok) {
        ctx.bus.invalidMessages.inc({ subject: Subjects.registerAll });
        return;
      }
      // Refused without effect or answer: the runner's credentials speak for another runner.
      const refusal = registrationRefusal(ctx, msg.subject, msg.reply, decoded.value);
      if (refusal !== undefined) {
        ctx.metrics.registrationsRefused.inc({ reason: refusal });
        ctx.log.warn({ runnerId: decoded.value.runnerId, poolId: decoded.value.poolId, reason: refusal }, "registration refused");
        return;
      }
      registerRunner(ctx, decoded.value).then(
        (reply) => msg.respond(encoderOf(ctx.nc)(RegisterRunnerReply, reply)),
        (e: unknown) => ctx.log.error({ err: e, runnerId: decoded.value.runnerId }, "registration failed"),
      );
    },
  });
}

/** Creating one touches nothing; start() builds the views, serves the API and consumes runner facts. */
export function createScheduler(deps: SchedulerDeps): { start(): Promise<Scheduler> } {
  return { start: () => startScheduler(deps) };
}

async function startScheduler(deps: SchedulerDeps): Promise<Scheduler> {
  const { ctx, placer, endOfLife, replayed } = await buildContext(deps);
  await ensureFactsConsumer(deps.nc);
  const facts: ConsumerHandle = await consumeTyped(ctx.js, {
    stream: Streams.runner,
    consumer: RUNNER_FACTS_CONSUMER,
    schema: RunnerFact,
    metrics: ctx.bus,
    log: ctx.log,
    // Facts about different sessions are independent; those about one session stay in order.
    lanes: { concurrency: FACT_LANES, keyOf: sessionOfFact },
    // Never parked: a fact dropped leaves its session's record behind its runner for good,
    // and what fails here is the store not answering, which ends. Backs off to 30 s apart.
    redelivery: NEVER_PARK,
    handler: async (fact, msg) => {
      const outcome = await applyRunnerFact(ctx, fact, msg.subject);
      if (outcome !== "applied") ctx.log.debug({ sessionId: fact.sessionId, type: fact.type, outcome }, "runner fact not applied");
    },
  });
  const inFlight = new InFlight();
  const subs = [...serveApi(ctx, inFlight), ...createEnvironmentApi(ctx, ctx.envs), serveRegistration(ctx), ...serveRunnerRpc(ctx)];
  ctx.presence.start(deps.nc, deps.bus);
  const startedAt = deps.now();
  let sweeping: Promise<void> | undefined;
  const memory = newSweepMemory();
  const runSweep = () => (sweeping ??= sweep(ctx, startedAt, memory).finally(() => (sweeping = undefined)));
  // Placement is event driven; the tick retries what could not be placed (e.g. a
  // lost race) and runs the timeout and TTL policies.
  const tick = setInterval(() => {
    ctx.requestPlacement();
    void runSweep();
  }, deps.config.tickMs);
  ctx.requestPlacement();
  const gc = createCheckpointGc({
    nc: deps.nc,
    sealKeys: ctx.sealKeys,
    sessions: () => [...ctx.sessionView.values()].map((v) => v.value),
    environments: () => [...ctx.envs.view.values()].map((v) => v.value).filter((e) => !isDeleted(e)),
    runners: () => [...ctx.runnerView.values()].map((v) => v.value),
    now: deps.now,
    graceMs: deps.config.checkpointGcGraceMs,
    metrics: deps.metrics.checkpointGc,
    log: deps.log,
  });
  let collecting: Promise<CheckpointGcResult> | undefined;
  const collect = () => (collecting ??= gc.run().finally(() => (collecting = undefined)));
  const gcTimer =
    deps.config.checkpointGcIntervalMs > 0
      ? setInterval(() => collect().catch((err: unknown) => deps.log.warn({ err }, "checkpoint collection failed")), deps.config.checkpointGcIntervalMs)
      : undefined;
  gcTimer?.unref();
  return {
    context: ctx,
    replayed,
    sweep: runSweep,
    collectCheckpoints: collect,
    stop: async () => {
      // Stop taking requests (those already delivered are still handled: drain, not unsubscribe; the
      // queue group sends new ones to the other replicas), then answer what was taken, within a bound.
      await Promise.all(subs.map((sub) => sub.drain().catch(() => undefined)));
      const unanswered = await inFlight.settled(deps.config.operationWaitMs + STOP_GRACE_MS);
      if (unanswered > 0) ctx.log.warn({ unanswered }, "stopping with requests still unanswered");
      clearInterval(tick);
      clearInterval(gcTimer);
      await collecting?.catch(() => undefined);
      ctx.presence.stop();
      ctx.leases.stop();
      endOfLife.stop();
      await placer.stop();
      await sweeping;
      await facts.stop();
      ctx.sessionView.stop();
      ctx.runnerView.stop();
      ctx.envs.stop();
    },
  };
}
