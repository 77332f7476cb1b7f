import { mkdir, readdir, rm } from "node:fs/promises";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { Buckets, DispatchCommand, runnerKey, Streams, type RegisterRunnerReply } from "@paddock/contracts";
import { consumeTyped, type ConsumerHandle } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { RunnerConfig } from "./config.ts";
import { createFactPublisher } from "./facts.ts";
import { readGeneration, writeGeneration } from "./generation-store.ts";
import { startLeaseRenewer, type LeaseRenewer } from "./lease.ts";
import type { RunnerMetrics } from "./metrics.ts";
import { ensureDispatchConsumer, register } from "./registration.ts";
import { createCheckpointStore } from "./checkpoint.ts";
import { noSecrets, type SecretResolver } from "./secrets.ts";
import { SessionManager } from "./sessions.ts";

export type AgentConfig = Pick<
  RunnerConfig,
  | "runnerId"
  | "poolId"
  | "capacityTotal"
  | "capabilities"
  | "dataDir"
  | "leaseRenewMs"
  | "killGraceMs"
  | "registerTimeoutMs"
  | "gatewayUrl"
  | "watchDebounceMs"
  | "watchMaxReloads"
  | "watchWindowMs"
> & {
  /** PATH of session processes. */
  childPath: string;
};

export interface RunnerAgentDeps {
  nc: NatsConnection;
  config: AgentConfig;
  log: Logger;
  metrics: RunnerMetrics;
  now: () => number;
  newId: () => string;
  /** Delay used between retries; injectable so tests never wait on wall-clock backoff. */
  sleep?: (ms: number) => Promise<void>;
  /** Values for environments' secretRefs; resolves nothing by default. */
  secrets?: SecretResolver;
}

export interface RunnerAgent {
  /** Registers, starts the lease and consumes dispatch; resolves once serving. */
  start(): Promise<{ generation: number }>;
  /** Stops consuming, kills sessions (their last output and facts go out), stops the lease. */
  stop(): Promise<void>;
  /** The generation granted at registration; 0 before. */
  readonly generation: number;
  isReady(): boolean;
  sessions: SessionManager;
}

const defaultSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Builds the agent; nothing happens until start(). Constructible by tests with injected clock and ids. */
export function createRunnerAgent(deps: RunnerAgentDeps): RunnerAgent {
  const { nc, config, log, metrics } = deps;
  const sleep = deps.sleep ?? defaultSleep;
  const js = jetstream(nc);
  let generation = 0;
  let stopped = false;
  let ready = false;
  let consumer: ConsumerHandle | undefined;
  let lease: LeaseRenewer | undefined;
  const facts = createFactPublisher({
    js,
    log,
    runnerId: config.runnerId,
    poolId: config.poolId,
    runnerGeneration: () => generation,
    now: deps.now,
    isStopped: () => stopped,
    sleep,
  });
  let sessions: SessionManager | undefined;
  const requireSessions = () => {
    if (!sessions) throw new Error("runner agent not started");
    return sessions;
  };

  /** Acks once the command is queued on its session: a long setup or checkpoint never stalls dispatch. */
  const handleDispatch = (cmd: DispatchCommand): Promise<void> => {
    // A command for another registration (before a restart) targets sessions this process never held.
    if (cmd.runnerGeneration !== generation) {
      metrics.staleDispatch.inc();
      log.info({ sessionId: cmd.sessionId, type: cmd.type, runnerGeneration: cmd.runnerGeneration, generation }, "stale dispatch ignored");
      return Promise.resolve();
    }
    requireSessions().dispatch(cmd);
    return Promise.resolve();
  };

  const start = async () => {
    const jsm = await jetstreamManager(nc);
    sessions = new SessionManager({
      nc,
      js,
      jsm,
      log,
      metrics,
      facts,
      checkpoints: createCheckpointStore(nc),
      secrets: deps.secrets ?? noSecrets,
      now: deps.now,
      dataDir: config.dataDir,
      childPath: config.childPath,
      killGraceMs: config.killGraceMs,
      gatewayUrl: config.gatewayUrl,
      watch: { debounceMs: config.watchDebounceMs, maxReloads: config.watchMaxReloads, windowMs: config.watchWindowMs },
    });
    await mkdir(config.dataDir, { recursive: true });
    await removeLeftoverSessions(sessions.sessionsDir(), log);
    const persisted = await readGeneration(config.dataDir);
    const consumerName = await ensureDispatchConsumer(jsm, config.poolId, config.runnerId);
    const reply: RegisterRunnerReply = await register({
      nc,
      log,
      runnerId: config.runnerId,
      poolId: config.poolId,
      capacityTotal: config.capacityTotal,
      capabilities: config.capabilities,
      sessions: sessions.held(),
      persisted,
      timeoutMs: config.registerTimeoutMs,
      isStopped: () => stopped,
      sleep,
    });
    await writeGeneration(config.dataDir, reply.generation);
    generation = reply.generation;
    log.info({ generation, persisted }, "registered");
    const kv = await new Kvm(nc).open(Buckets.runnerLeases);
    lease = await startLeaseRenewer({
      kv,
      key: runnerKey(config.poolId, config.runnerId),
      lease: () => ({ runnerId: config.runnerId, poolId: config.poolId, generation, renewedAt: deps.now() }),
      intervalMs: config.leaseRenewMs,
      log,
    });
    for (const held of reply.destroy) sessions.dispatch({ type: "destroy", ...held, runnerGeneration: generation });
    consumer = await consumeTyped(js, { stream: Streams.dispatch, consumer: consumerName, schema: DispatchCommand, metrics, log, handler: handleDispatch });
    ready = true;
    return { generation };
  };

  const stop = async () => {
    ready = false;
    await consumer?.stop();
    // Bounded: with the bus gone, writers and facts would retry forever.
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), config.killGraceMs + 5_000)));
    const outcome = await Promise.race([sessions?.stopAll().then(() => "done" as const), deadline]);
    clearTimeout(timer);
    if (outcome === "timeout") log.warn("sessions did not finish reporting before shutdown");
    stopped = true;
    sessions?.abortWriters();
    await lease?.stop();
  };

  return {
    start,
    stop,
    get generation() {
      return generation;
    },
    isReady: () => ready && !nc.isClosed(),
    get sessions() {
      return requireSessions();
    },
  };
}

/**
 * A fresh process holds no sessions: the process backend's children died with
 * the previous one, so their directories are garbage.
 */
async function removeLeftoverSessions(dir: string, log: Logger): Promise<void> {
  let entries: string[];
  try {
    entries = await readdir(dir);
  } catch {
    return;
  }
  if (entries.length === 0) return;
  log.info({ count: entries.length }, "removing session directories left by a previous process");
  await rm(dir, { recursive: true, force: true });
}
