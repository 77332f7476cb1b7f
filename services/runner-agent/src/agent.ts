import type { Subscription } from "@nats-io/transport-node";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm, type KV, type KvEntry } from "@nats-io/kv";
import { Buckets, DispatchCommand, IMAGE_CAPABILITY, runnerKey, Streams, type RegisterRunnerReply } from "@paddock/contracts";
import { consumeTyped, encoderOf, type ConsumerHandle } from "@paddock/bus";
import { createFactPublisher } from "./fleet/facts.ts";
import { startLeaseRenewer, type LeaseRenewer } from "./fleet/lease.ts";
import { ensureDispatchConsumer } from "./fleet/dispatch-consumer.ts";
import { fenceReason, registerRunner } from "./fleet/agent-registration.ts";
import { StoppedError } from "./errors.ts";
import { createHeldCheck } from "./fleet/held-check.ts";
import { createCheckpointStore } from "./workspace/checkpoint.ts";
import { FillWorker } from "./workspace/fill-worker-host.ts";
import { sandboxCapability, SandboxKind, type SandboxBackend } from "./sandbox/backend.ts";
import { sandboxImages } from "./image-roots.ts";
import { createImageStore, ImagesConfig, type ImageStore } from "./images/index.ts";
import type { BwrapEvent } from "./sandbox/bwrap/backend.ts";
import { chooseSandbox, PROCESS_SANDBOX } from "./sandbox-choice.ts";
import { RegistrationConfirmation } from "./fleet/confirmation.ts";
import { noSecrets } from "./sessions/secrets.ts";
import { SessionManager } from "./sessions/sessions.ts";
import { heldAt, serveWorkspaceOps, translate, type Target, type WorkspaceOps } from "./workspace/workspace-ops.ts";
import { serveExecOps } from "./exec/exec-ops.ts";
import { serveMetricsOp } from "./sessions/metrics-op.ts";
import { serveProbeOps } from "./agents/probe-ops.ts";
import { DataPlane } from "./ports/data-plane.ts";
import { serveTunnels } from "./ports/tunnels.ts";
import { ScreenHost } from "./terminal/screen-host.ts";
import { defaultTerminalSettings } from "./terminal/term-options.ts";
import { ActivityReporter, DEFAULT_ACTIVITY_MS } from "./fleet/activity.ts";
import { DEFAULT_SETTLE_MS } from "./sessions/watch-reload.ts";
import { FS_EXCHANGE_ADDON_PATH } from "./config.ts";
import { fileReplacer } from "./workspace/replace-file.ts";

export { fenceReason } from "./fleet/agent-registration.ts";
import type { RunnerAgent, RunnerAgentDeps } from "./agent-types.ts";

/** How often, at most, a runner looks for processes of sessions it does not hold (a /proc scan). */
export const STRAY_SWEEP_MS = 5_000;
const DEFAULT_HELD_CHECK_MS = 30_000;

export type { AgentConfig, RegisteredEvent, RunnerAgent, RunnerAgentDeps } from "./agent-types.ts";

const defaultSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Builds the agent; nothing happens until start(). Constructible by tests with injected clock and ids. */
export function createRunnerAgent(deps: RunnerAgentDeps): RunnerAgent {
  const { nc, config, log, metrics } = deps;
  const sleep = deps.sleep ?? defaultSleep;
  const js = jetstream(nc);
  const key = runnerKey(config.poolId, config.runnerId);
  let generation = 0;
  let stopped = false;
  let ready = false;
  let consumer: ConsumerHandle | undefined;
  let workspaceOps: WorkspaceOps | undefined;
  let execOps: Subscription[] = [];
  let tunnels: ReturnType<typeof serveTunnels> | undefined;
  let dataPlane: DataPlane | undefined;
  let lease: LeaseRenewer | undefined;
  let runners: KV | undefined;
  let statusWatch: AsyncIterator<unknown> | undefined;
  /** A re-registration in flight; at most one. */
  let registering: Promise<void> | undefined;
  /** Set when the old generation must no longer be acted on; cleared by an accepted re-registration. */
  let fenced = false;
  /** Bumped on every registration change, so a fence check that read the record before it is discarded. */
  let epoch = 0;
  /**
   * When the runner last saw its registration confirmed (registered, or its
   * record read back unchanged after a renewal), as of when it asked. A runner that was stopped
   * (SIGSTOP, a long stall) past its lease may have lost its sessions to
   * another runner without knowing yet: until a check confirms it again, it
   * takes no controller input (nats-server delivers what was typed meanwhile
   * the moment it wakes) and serves no workspace operation.
   */
  const confirmation = new RegistrationConfirmation(deps.now, config.leaseTtlMs);
  const confirmed = () => !stopped && !fenced && registering === undefined && confirmation.holds();
  const facts = createFactPublisher({
    js,
    encode: encoderOf(nc),
    log,
    runnerId: config.runnerId,
    poolId: config.poolId,
    runnerGeneration: () => generation,
    now: deps.now,
    isStopped: () => stopped,
    sleep,
  });
  let sessions: SessionManager | undefined;
  let sandbox: SandboxBackend | undefined;
  let images: ImageStore | undefined;
  /** The configured capabilities and `sandbox:<backend>` (known once the backend is chosen at start). */
  let capabilities = config.capabilities;
  const requireSessions = () => {
    if (!sessions) throw new Error("runner agent not started");
    return sessions;
  };

  /** Acks once the command is queued on its session: a long setup or checkpoint never stalls dispatch. */
  const handleDispatch = (cmd: DispatchCommand): Promise<void> => {
    // A command for the generation a re-registration in flight may be granted: retry it once that settles.
    if (registering && cmd.runnerGeneration > generation) {
      return Promise.reject(new Error(`re-registering: runner generation ${cmd.runnerGeneration} not granted yet`));
    }
    // A command for another registration (before a restart, or one that was fenced) targets
    // sessions this runner no longer holds under that generation.
    if (fenced || cmd.runnerGeneration !== generation) {
      metrics.staleDispatch.inc();
      log.info({ sessionId: cmd.sessionId, type: cmd.type, runnerGeneration: cmd.runnerGeneration, generation, fenced }, "stale dispatch ignored");
      return Promise.resolve();
    }
    requireSessions().dispatch(cmd);
    return Promise.resolve();
  };

  /** Claims the persisted generation + 1 (authoritative + 1 after a refusal), persists the grant. */
  const registerOnce = (): Promise<RegisterRunnerReply> =>
    registerRunner({ nc, log, config: { ...config, capabilities }, held: () => requireSessions().held(), isStopped: () => stopped, sleep });

  /**
   * The runner may have been declared lost and its sessions moved: stop
   * acting on the old generation at once, register again with what it holds,
   * tear down what the reply gives to successors (silently), and go on with
   * the rest under the new generation. Writers of the old generation latch on
   * their own; facts produced under it keep it and are dropped by the
   * scheduler. A refusal leaves the runner fenced; the next renewal tries again.
   */
  const reregister = (reason: string): Promise<void> => {
    registering ??= (async () => {
      epoch += 1;
      fenced = true;
      metrics.reregistrations.inc({ reason });
      log.warn({ reason, generation }, "re-registering");
      try {
        const askedAt = confirmation.ask();
        const reply = await registerOnce();
        if (stopped) return;
        generation = reply.generation;
        epoch += 1;
        fenced = false;
        confirmation.confirm(askedAt);
        void lease?.renewNow();
        await requireSessions().discard(reply.destroy);
        requireSessions().restate(reply.kept);
        deps.onRegistered?.({ generation, reason, destroyed: reply.destroy });
      } catch (err) {
        if (err instanceof StoppedError || stopped) return;
        log.error({ err, reason }, "re-registration failed; the runner stays fenced");
      } finally {
        registering = undefined;
      }
    })();
    return registering;
  };

  /** After each renewal, at most every STRAY_SWEEP_MS: no process of a session this runner does not hold keeps running. */
  let lastSweepAt = Number.NEGATIVE_INFINITY;
  const sweepStrays = (): void => {
    if (stopped || !sessions || deps.now() - lastSweepAt < STRAY_SWEEP_MS) return;
    lastSweepAt = deps.now();
    sessions.reapStrays().catch((err: unknown) => log.warn({ err }, "stray process sweep failed"));
  };

  const heldCheck = createHeldCheck({
    nc,
    log,
    metrics,
    now: deps.now,
    poolId: config.poolId,
    runnerId: config.runnerId,
    intervalMs: config.heldCheckMs ?? DEFAULT_HELD_CHECK_MS,
    generation: () => (confirmed() ? generation : undefined),
    heldSince: (before) => requireSessions().heldSince(before),
    release: (held, runnerGeneration) => requireSessions().dispatch({ type: "destroy", ...held, runnerGeneration }),
  });

  // Restored files' bytes fetched and written off the event loop (two worker threads, started on first use).
  const filler = deps.bus ? new FillWorker({ bus: { ...deps.bus, name: `${deps.bus.name}-restore` } }) : undefined;
  // Screen emulators off the event loop (a worker thread, started by start()).
  const screens = new ScreenHost({ onLost: (err) => log.warn({ err }, "screen worker ended; the screens it held write no more checkpoints this placement") });
  const activity = new ActivityReporter({ nc, log, poolId: config.poolId, runnerId: config.runnerId, intervalMs: config.activityMs ?? DEFAULT_ACTIVITY_MS });

  /** After each renewal: read the runner record the scheduler keeps; lost or a moved generation means fenced. */
  const checkFence = async (): Promise<void> => {
    sweepStrays();
    if (sessions) heldCheck.maybeRun();
    if (stopped || registering || !runners) return;
    const seen = epoch;
    const askedAt = confirmation.ask();
    let entry: KvEntry | null;
    try {
      entry = await runners.get(key);
    } catch (err) {
      // Not evidence of loss: the lease is the scheduler's signal, and a store blip must not fence a healthy runner.
      log.warn({ err }, "runner record not readable");
      return;
    }
    if (stopped || registering || seen !== epoch) return;
    const reason = fenceReason(entry, generation, log);
    if (!reason && !fenced) confirmation.confirm(askedAt);
    // Also when a refusal left the runner fenced: each renewal tries again.
    if (reason) void reregister(reason);
  };

  const watchReconnects = () => {
    const it = nc.status()[Symbol.asyncIterator]();
    statusWatch = it;
    void (async () => {
      for (;;) {
        const next = await it.next();
        if (next.done || stopped) return;
        if ((next.value as { type?: string }).type === "reconnect") void reregister("reconnect");
      }
    })().catch((err: unknown) => log.warn({ err }, "connection status watch ended"));
  };

  const start = async () => {
    const jsm = await jetstreamManager(nc);
    // Sessions naming an image are rooted in it: the store caches unpacked roots by digest under the data dir.
    images = createImageStore({ root: join(config.dataDir, "images"), config: config.images ?? ImagesConfig.parse({}) });
    await images.start();
    const onBwrapEvent = (e: BwrapEvent) => {
      if (e.type === "app_start") metrics.sandboxAppStarts.inc({ start: e.start });
      else if (e.type === "ready_count") metrics.sandboxWarmReady.set(e.ready);
      else if (e.type === "network_work") metrics.sandboxNetworkWork.set(e.underWay);
    };
    const backend = deps.sandbox ?? (await chooseSandbox(config.sandbox ?? PROCESS_SANDBOX, { log, childPath: config.childPath, dataDir: config.dataDir, images: sandboxImages(images), onBwrapEvent }));
    sandbox = backend;
    // Only a backend that roots sessions in images takes sessions naming one (the scheduler requires image:oci of them).
    const imageCapable = backend.kind === SandboxKind.bwrap ? [IMAGE_CAPABILITY] : [];
    capabilities = [
      ...config.capabilities.filter((c) => !c.startsWith("sandbox:") && !c.startsWith("limits:") && c !== IMAGE_CAPABILITY),
      sandboxCapability(backend.kind),
      ...imageCapable,
      ...backend.limits.map((l) => `limits:${l}`),
    ];
    sessions = new SessionManager({
      runner: { poolId: config.poolId, runnerId: config.runnerId },
      inputAdmission: { open: confirmed, epoch: () => epoch, onConfirmed: (listener) => confirmation.onConfirm(listener) },
      nc,
      js,
      jsm,
      log,
      metrics,
      facts,
      sandbox: backend,
      checkpoints: createCheckpointStore(
        nc,
        { poolId: config.poolId, runnerId: config.runnerId },
        { compression: config.checkpointCompression, format: config.checkpointFormat, onManifest: (stats) => log.info(stats, "checkpoint manifest stored"), ...(filler ? { filler, fillerMinChunks: config.restoreWorkersMinChunks } : {}) },
      ),
      secrets: deps.secrets ?? noSecrets,
      now: deps.now,
      dataDir: config.dataDir,
      childPath: config.childPath,
      killGraceMs: config.killGraceMs,
      gatewayUrl: config.gatewayUrl,
      watch: { debounceMs: config.watchDebounceMs, maxReloads: config.watchMaxReloads, windowMs: config.watchWindowMs, settleMs: config.watchSettleMs ?? DEFAULT_SETTLE_MS },
      activity,
      ...(config.terminal ? { terminal: config.terminal } : {}),
      openScreen: screens.open,
      ...(config.execReaderTimeoutMs !== undefined ? { exec: { readerTimeoutMs: config.execReaderTimeoutMs } } : {}),
    });
    await mkdir(config.dataDir, { recursive: true });
    await backend.prepare(sessions.sessionsDir());
    const dispatchConsumer = await ensureDispatchConsumer(jsm, config.poolId, config.runnerId, config.replicas ?? 1);
    // Direct gets name the key in the subject, so a runner's permissions can confine it to its own record.
    runners = await new Kvm(nc).open(Buckets.runners, { allow_direct: true });
    const askedAt = confirmation.ask();
    const reply = await registerOnce();
    generation = reply.generation;
    epoch += 1;
    confirmation.confirm(askedAt);
    lease = await startLeaseRenewer({
      js,
      encode: encoderOf(nc),
      bucket: Buckets.runnerLeases,
      key,
      lease: () => ({ runnerId: config.runnerId, poolId: config.poolId, generation, renewedAt: deps.now() }),
      intervalMs: config.leaseRenewMs,
      ttlMs: config.leaseTtlMs,
      afterRenew: checkFence,
      log,
    });
    for (const held of reply.destroy) sessions.dispatch({ type: "destroy", ...held, runnerGeneration: generation });
    if (config.dataPlane) {
      const after = (ms: number, fn: () => void) => {
        const t = setTimeout(fn, ms).unref();
        return () => clearTimeout(t);
      };
      dataPlane = new DataPlane({ ...config.dataPlane, now: deps.now, after, onActivity: (id) => activity.touch(id), log });
      await dataPlane.start();
    }
    const plane = dataPlane;
    workspaceOps = serveWorkspaceOps({
      nc,
      poolId: config.poolId,
      runnerId: config.runnerId,
      session: (id) => requireSessions().get(id),
      serving: confirmed,
      onActivity: (id) => activity.touch(id),
      ...(plane ? { offer: (taker, sessionId) => plane.offerSocket(taker, sessionId) } : {}),
      replaceFile: fileReplacer(FS_EXCHANGE_ADDON_PATH, log),
      ...(config.workspace ? { limits: config.workspace } : {}),
      now: deps.now,
      childPath: config.childPath,
      metrics,
      log,
    });
    tunnels = serveTunnels({
      nc,
      poolId: config.poolId,
      runnerId: config.runnerId,
      held: (t) => heldAt((id) => requireSessions().get(id), confirmed, t),
      translate,
      onActivity: (id) => activity.touch(id),
      ...(dataPlane ? { dataPlane } : {}),
      every: (ms, fn) => {
        const t = setInterval(fn, ms);
        return () => clearInterval(t);
      },
      metrics,
      log,
    });
    const heldOps = { nc, poolId: config.poolId, runnerId: config.runnerId, held: (t: Target) => heldAt((id) => requireSessions().get(id), confirmed, t), translate, metrics, log };
    execOps = [...serveExecOps({ ...heldOps, session: (id) => requireSessions().get(id) }), ...serveProbeOps(heldOps), serveMetricsOp(heldOps)];
    consumer = await consumeTyped(js, {
      stream: Streams.dispatch,
      consumer: dispatchConsumer.name,
      schema: DispatchCommand,
      metrics,
      log,
      handler: handleDispatch,
      recovery: dispatchConsumer.recovery,
    });
    watchReconnects();
    activity.start();
    // Its start (~0.3 s of CPU) is paid here, not by the first session that prints.
    if ((config.terminal ?? defaultTerminalSettings).screen) screens.warm();
    ready = true;
    deps.onRegistered?.({ generation, reason: "start", destroyed: reply.destroy });
    return { generation };
  };

  const stop = async () => {
    ready = false;
    workspaceOps?.stop();
    for (const sub of execOps) sub.unsubscribe();
    for (const sub of tunnels?.subs ?? []) sub.unsubscribe();
    tunnels?.stop();
    await dataPlane?.stop();
    void statusWatch?.return?.();
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
    activity.stop();
    await registering;
    await sandbox?.stop();
    await images?.stop();
    await screens.stop();
    await filler?.stop();
  };

  return {
    start,
    stop,
    get generation() {
      return generation;
    },
    get fenced() {
      return fenced || registering !== undefined;
    },
    isReady: () => ready && !nc.isClosed(),
    get sessions() {
      return requireSessions();
    },
    testing: {
      stopLease: async () => {
        await lease?.stop();
      },
      renewNow: async () => {
        await lease?.renewNow();
      },
      checkHeld: () => heldCheck.run(),
    },
  };
}
