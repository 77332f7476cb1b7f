import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { appsOf, type DispatchCommand } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { spawnApp, type AppExit, type AppProcess } from "./app-process.ts";
import { SpawnError } from "./errors.ts";
import type { FactPublisher } from "./facts.ts";
import { ControllerGate, subscribeInput } from "./input.ts";
import type { RunnerMetrics } from "./metrics.ts";
import { TermWriter } from "./term-writer.ts";
import type { HeldSession } from "./types.ts";

type StartCommand = Extract<DispatchCommand, { type: "start" }>;

interface AppRuntime {
  proc: AppProcess;
  writer: TermWriter;
  /** Resolves once the app exited and its exit marker is appended (or the writer gave up). */
  finished: Promise<AppExit>;
}

interface SessionRuntime {
  held: HeldSession;
  dir: string;
  apps: Map<string, AppRuntime>;
  input: Subscription | undefined;
  /** Set while destroying: its exit is the destroy's doing, not a fact to report. */
  destroying: boolean;
  /** The running fact; an exited fact waits for it so RUNNER keeps their order. */
  runningFact: Promise<boolean>;
  done: Promise<void>;
}

export interface SessionManagerOptions {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  log: Logger;
  metrics: RunnerMetrics;
  facts: FactPublisher;
  dataDir: string;
  /** PATH given to session processes. */
  childPath: string;
  killGraceMs: number;
}

/** How many ended sessions are remembered, so a redelivered start never runs one twice. */
const TOMBSTONES = 10_000;

/** The sessions of this runner: start and destroy them, report what happened. */
export class SessionManager {
  private readonly sessions = new Map<string, SessionRuntime>();
  /** sessionId → the placement generation that ended here (failed or destroyed). */
  private readonly ended = new Map<string, number>();

  constructor(private readonly opts: SessionManagerOptions) {}

  held(): HeldSession[] {
    return [...this.sessions.values()].map((s) => s.held);
  }

  sessionsDir(): string {
    return join(this.opts.dataDir, "sessions");
  }

  /** Idempotent by (session, placement generation): a redelivered start only re-reports. */
  async start(cmd: StartCommand): Promise<void> {
    const held: HeldSession = { sessionId: cmd.sessionId, workspaceId: cmd.workspaceId, placementGeneration: cmd.placementGeneration };
    const existing = this.sessions.get(cmd.sessionId);
    if (existing && existing.held.placementGeneration >= cmd.placementGeneration) {
      if (existing.held.placementGeneration === cmd.placementGeneration) await existing.runningFact;
      return;
    }
    if ((this.ended.get(cmd.sessionId) ?? 0) >= cmd.placementGeneration) return;
    // An older placement of the same session here is superseded by this one.
    if (existing) await this.teardown(existing);
    const dir = join(this.sessionsDir(), cmd.sessionId);
    const workspace = join(dir, "workspace");
    await mkdir(workspace, { recursive: true });
    let session: SessionRuntime;
    try {
      session = this.launch(held, dir, workspace, cmd);
    } catch (err) {
      if (!(err instanceof SpawnError)) throw err;
      await rm(dir, { recursive: true, force: true });
      this.remember(held);
      this.opts.log.info({ sessionId: held.sessionId, code: err.code, reason: err.message }, "session failed to start");
      await this.opts.facts.publish(held, { type: "failed", reason: err.message });
      return;
    }
    this.opts.log.info({ sessionId: held.sessionId, placementGeneration: held.placementGeneration, apps: session.apps.size }, "session started");
    await session.runningFact;
  }

  /** Kills the session's processes, removes its directory, reports destroyed. */
  async destroy(target: HeldSession): Promise<void> {
    const existing = this.sessions.get(target.sessionId);
    if (existing && existing.held.placementGeneration > target.placementGeneration) return; // for an older placement
    if ((this.ended.get(target.sessionId) ?? 0) > target.placementGeneration) return;
    if (existing) await this.teardown(existing);
    else await rm(join(this.sessionsDir(), target.sessionId), { recursive: true, force: true });
    this.remember(target);
    await this.opts.facts.publish(target, { type: "destroyed" });
  }

  /** Shutdown: kill every session; their exit markers and exited facts go out while the bus is up. */
  async stopAll(): Promise<void> {
    await Promise.all(
      [...this.sessions.values()].map(async (s) => {
        s.input?.unsubscribe();
        s.input = undefined;
        await Promise.all([...s.apps.values()].map((a) => a.proc.terminate(this.opts.killGraceMs)));
        await s.done;
      }),
    );
  }

  /** Shutdown with the bus gone: writers stop retrying so nothing waits on them. */
  abortWriters(): void {
    for (const s of this.sessions.values()) for (const a of s.apps.values()) a.writer.abort();
  }

  private launch(held: HeldSession, dir: string, workspace: string, cmd: StartCommand): SessionRuntime {
    const apps = new Map<string, AppRuntime>();
    const env = this.childEnv(workspace, held.sessionId);
    try {
      for (const spec of appsOf(cmd.spec)) {
        const writer = this.newWriter(held, spec.name);
        const proc = spawnApp({ app: spec, cwd: workspace, env, onData: (bytes) => writer.append(bytes) });
        writer.setPressureHandler((paused) => proc.setPaused(paused));
        const finished = proc.exited.then(async (exit) => {
          await writer.finish(exit.exitCode);
          return exit;
        });
        apps.set(spec.name, { proc, writer, finished });
      }
    } catch (err) {
      // Apps that did start must not outlive a session that failed to start.
      for (const a of apps.values()) {
        void a.proc.terminate(this.opts.killGraceMs);
      }
      throw err;
    }
    const session: SessionRuntime = {
      held,
      dir,
      apps,
      input: undefined,
      destroying: false,
      runningFact: this.opts.facts.publish(held, { type: "running" }),
      done: Promise.resolve(),
    };
    const gate = new ControllerGate();
    session.input = subscribeInput({
      nc: this.opts.nc,
      sessionId: held.sessionId,
      gate,
      app: (name) => apps.get(name)?.proc,
      metrics: this.opts.metrics,
      log: this.opts.log,
    });
    session.done = this.watchExit(session);
    this.sessions.set(held.sessionId, session);
    this.opts.metrics.sessions.set(this.sessions.size);
    return session;
  }

  /**
   * Once every app exited and its exit marker is in TERM, reports exited with
   * the first app's code (the session's main process by convention).
   */
  private async watchExit(session: SessionRuntime): Promise<void> {
    const exits = await Promise.all([...session.apps.values()].map((a) => a.finished));
    session.input?.unsubscribe();
    session.input = undefined;
    if (session.destroying) return;
    const first = exits[0] ?? { exitCode: null, signal: undefined };
    await session.runningFact;
    await this.opts.facts.publish(session.held, {
      type: "exited",
      exitCode: first.exitCode,
      ...(first.signal ? { signal: first.signal } : {}),
    });
    this.opts.log.info({ sessionId: session.held.sessionId, exitCode: first.exitCode, signal: first.signal }, "session exited");
  }

  private async teardown(session: SessionRuntime): Promise<void> {
    session.destroying = true;
    session.input?.unsubscribe();
    session.input = undefined;
    await Promise.all([...session.apps.values()].map((a) => a.proc.terminate(this.opts.killGraceMs)));
    await session.done;
    await rm(session.dir, { recursive: true, force: true });
    if (this.sessions.get(session.held.sessionId) === session) this.sessions.delete(session.held.sessionId);
    this.opts.metrics.sessions.set(this.sessions.size);
  }

  private remember(held: HeldSession): void {
    this.ended.delete(held.sessionId);
    this.ended.set(held.sessionId, held.placementGeneration);
    if (this.ended.size > TOMBSTONES) {
      const oldest = this.ended.keys().next();
      if (!oldest.done) this.ended.delete(oldest.value);
    }
  }

  private newWriter(held: HeldSession, app: string): TermWriter {
    return new TermWriter({
      js: this.opts.js,
      jsm: this.opts.jsm,
      sessionId: held.sessionId,
      app,
      placementGeneration: held.placementGeneration,
      metrics: this.opts.metrics,
      log: this.opts.log,
    });
  }

  /** A minimal environment: nothing of the agent's own (tokens, NATS credentials) leaks in. */
  private childEnv(workspace: string, sessionId: string): Record<string, string> {
    return {
      PATH: this.opts.childPath,
      HOME: workspace,
      TERM: "xterm-256color",
      LANG: "C.UTF-8",
      PADDOCK_SESSION_ID: sessionId,
    };
  }
}
