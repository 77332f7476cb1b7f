import { join } from "node:path";
import type { Duplex } from "node:stream";
import type { Subscription } from "@nats-io/transport-node";
import { appsOf, declaredPorts, NotFoundError, type HeldSession, type RunTrigger, type SessionState, type Usage } from "@paddock/contracts";
import type { AppSlot, GenerationEnd, GenerationStart } from "./app-slot.ts";
import { BootError, CommandRefusedError, RunnerError } from "../errors.ts";
import type { FactBody } from "../fleet/facts.ts";
import { ControllerGate, subscribeInput } from "../terminal/input.ts";
import { buildAppSlot, placementWiring } from "./app-wiring.ts";
import { requirePhase, type Phase, type SessionRuntimeDeps, type StartCommand } from "./session-deps.ts";
import { createSessionExecs } from "./session-exec.ts";
import type { SessionExecs } from "../exec/session-execs.ts";
import { createLaps } from "./laps.ts";
import { askCredentials, prepareSandbox, saveCheckpoint, SessionEgress } from "./session-sandbox.ts";
import { SessionFacts } from "./session-facts.ts";
import { UsageMeter, type UsageScope } from "../sandbox/usage.ts";
import type { AppProcess } from "../sandbox/process-group.ts";
import type { Sandbox, SandboxUser } from "../sandbox/backend.ts";
import type { WatchReloader } from "./watch-reload.ts";
import { watchSessionWorkspace } from "./session-watch.ts";

const DEFAULT_USAGE_SAMPLE_MS = 5_000; // sampling interval of a session's CPU and memory
/**
 * One placement of a session on this runner: its sandbox directory, apps and
 * their generations, and the facts it reports (in order, through one chain).
 * Commands run one at a time through run().
 */
export class SessionRuntime {
  readonly held: HeldSession;
  /** When this runner took the placement (ms): the held check asks only about placements older than its interval. */
  readonly heldSince: number;
  readonly workspace: string;
  phase: Phase = "booting";
  /** Aborted by destroy and shutdown: a long setup or init stops at once. */
  readonly abort = new AbortController();
  private readonly slots = new Map<string, AppSlot>();
  private readonly mode: StartCommand["mode"];
  private input: Subscription | undefined;
  private watcher: WatchReloader | undefined;
  /** A watch reload fell due while the apps were frozen. */
  private reloadOnResume = false;
  private ops: Promise<unknown> = Promise.resolve();
  /** Restarts in progress: a run-mode session does not end while one is. */
  private restarting = 0;
  /** The fact a cold suspend released the sandbox with (the manager keeps it across a re-registration). */
  releasedBy: FactBody | undefined;
  /** Measures this placement generation's usage from running until it ends (its samples are the session's metrics). */
  meter: UsageMeter | undefined;
  /** Egress: this session's proxy (egressAllow), from boot until the session ends; its byte count outlives it. */
  private readonly egress = new SessionEgress();
  /** This placement's facts (session-facts.ts); silenced once discarded, nothing more is reported. */
  private readonly facts: SessionFacts;
  /** What the apps run in (the runner's backend), from boot until the placement ends. */
  private sandbox: Sandbox | undefined;
  /** Processes exec'd in the sandbox (exec/), from running until the placement ends. */
  private execs: SessionExecs | undefined;

  constructor(
    private readonly deps: SessionRuntimeDeps,
    private readonly cmd: StartCommand,
    readonly dir: string,
  ) {
    this.held = { sessionId: cmd.sessionId, workspaceId: cmd.workspaceId, placementGeneration: cmd.placementGeneration };
    this.heldSince = deps.now();
    this.workspace = join(dir, "workspace");
    this.mode = cmd.mode;
    const booted = cmd.environment && !cmd.restore ? { setupHash: cmd.environment.setupHash } : {};
    this.facts = new SessionFacts(deps.facts, this.held, { type: "running", ...booted });
  }

  /**
   * Ends this generation's usage measurement and answers its totals, once:
   * later calls (exit after teardown, or the reverse) answer undefined.
   */
  async finishUsage(): Promise<Usage | undefined> {
    const meter = this.meter;
    this.meter = undefined;
    return meter?.finish(this.workspace);
  }

  /** The apps running now. */
  private apps(): AppProcess[] {
    return [...[...this.slots.values()].flatMap((slot) => (slot.proc ? [slot.proc] : [])), ...(this.execs?.procs() ?? [])];
  }

  /** Whose processes are the session's (its declared agents are looked for among them); undefined without a sandbox. */
  processScope = (): UsageScope | undefined => this.sandbox?.usageScope(this.apps());

  /** Runs fn after every earlier command of this session. */
  run<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.ops.then(fn);
    this.ops = next.catch(() => undefined);
    return next;
  }

  /** Publishes a fact after every earlier fact of this session, under the runner generation current now (SessionFacts.emit). */
  emit(body: FactBody, key?: string): Promise<boolean> {
    return this.facts.emit(body, key);
  }

  /** Restores the checkpoint (cold resume), boots the environment, starts the apps and reports running; false when it failed (reported, directory removed) or was aborted (the destroy cleans up). */
  async boot(): Promise<boolean> {
    const { cmd } = this;
    const credentials = askCredentials(this.deps, cmd, this.held);
    try {
      const sandbox = await this.deps.sandbox.create({ sessionId: this.held.sessionId, dir: this.dir, image: cmd.spec.image });
      this.sandbox = sandbox;
      const appEnv = await prepareSandbox({
        deps: this.deps,
        cmd,
        held: this.held,
        sandbox,
        credentials, // asked for before the create: the round trip overlaps it
        signal: this.abort.signal,
        startEgress: (host, port) => this.egress.start(this.cmd.spec.egressAllow ?? [], host, port, this.deps, this.ids(), () => this.phase === "ending"),
        emit: (body, key) => this.emit(body, key),
        logFields: this.ids(),
      });
      if (this.abort.signal.aborted) return false;
      this.execs = createSessionExecs(this.deps, this.held, sandbox, appEnv);
      const starts: Array<[AppSlot, GenerationStart]> = [];
      const wiring = placementWiring(this.deps, this.held, (slot, end) => this.onAppEnded(slot, end));
      // Watching before the apps start: what they write as they start is told from a user's change.
      if (this.mode === "watch") this.watcher = this.watchWorkspace();
      for (const spec of appsOf(cmd.spec, sandbox.image?.command)) {
        const slot = buildAppSlot(wiring, sandbox, spec, appEnv);
        // A cold resume or a takeover numbers the app's generations on from the record's.
        slot.generation = cmd.appGenerations?.[spec.name] ?? 0;
        this.slots.set(spec.name, slot);
        const started = await slot.start(cmd.trigger);
        if (!started.ok) throw new BootError(started.run.reason ?? `app ${spec.name}: could not start`);
        starts.push([slot, started]);
      }
      this.phase = "running";
      this.meter = new UsageMeter(() => sandbox.usageScope(this.apps()), this.deps.now, this.deps.usageSampleMs ?? DEFAULT_USAGE_SAMPLE_MS, () => this.egress.bytes(), this.workspace);
      this.meter.start();
      void this.meter.sample();
      this.input = subscribeInput({
        ...this.deps,
        ...this.deps.runner,
        admission: this.deps.inputAdmission,
        sessionId: this.held.sessionId,
        gate: new ControllerGate(),
        app: (name) => this.slots.get(name)?.proc,
      });
      this.watcher?.started();
      void this.emit(this.facts.runningFact);
      for (const [slot, started] of starts) void this.facts.reportRun(slot, started.run);
      this.deps.log.info({ ...this.ids(), apps: this.slots.size, mode: this.mode, trigger: cmd.trigger }, "session started");
      return true;
    } catch (err) {
      if (this.abort.signal.aborted) return false;
      this.phase = "ending";
      this.watcher?.close();
      await this.killAll();
      this.egress.stop();
      for (const slot of this.slots.values()) slot.abortLog();
      await this.removeSandbox();
      const reason = err instanceof RunnerError ? err.message : "session could not start";
      if (!(err instanceof RunnerError)) this.deps.log.error({ err, ...this.ids() }, "session start failed");
      else this.deps.log.info({ ...this.ids(), code: err.code, reason }, "session failed to start");
      await this.emit({ type: "failed", reason });
      return false;
    }
  }

  async suspendWarm(requestId: string): Promise<void> {
    this.require("running", "frozen");
    if (this.phase === "frozen") throw new CommandRefusedError("session is already suspended");
    this.sandbox?.freeze(this.apps());
    this.phase = "frozen";
    await this.emit({ type: "suspended", warm: true }, requestId);
  }

  async resumeWarm(requestId: string): Promise<void> {
    this.require("frozen", "running");
    if (this.phase !== "frozen") throw new CommandRefusedError("session is not suspended");
    this.sandbox?.thaw(this.apps());
    this.phase = "running";
    if (this.reloadOnResume) this.watcher?.poke();
    this.reloadOnResume = false;
    await this.emit({ type: "resumed" }, requestId);
  }

  /**
   * Freezes the apps so the workspace holds still (a warm-suspended session's
   * are already stopped), checkpoints it, then ends the apps without exit
   * markers or an exited fact and removes the sandbox. On a failed checkpoint
   * the apps go back to what they were (running, or still stopped) and the
   * command is refused with the checkpoint's reason.
   */
  async suspendCold(requestId: string, base?: readonly string[]): Promise<void> {
    this.require("running", "frozen");
    const wasFrozen = this.phase === "frozen";
    const { lap, took } = createLaps();
    if (!wasFrozen) this.sandbox?.freeze(this.apps());
    const saved = await saveCheckpoint(this.deps, this.held, this.workspace, requestId, this.sandbox?.user, base).catch((err: unknown) => {
      if (!wasFrozen) this.sandbox?.thaw(this.apps());
      throw err;
    });
    lap("checkpoint");
    this.phase = "ending";
    this.detach();
    // The sandbox goes away: this generation's usage ends here.
    const usage = lap("usage", await this.finishUsage());
    await this.killAll();
    await Promise.all([...this.slots.values()].map((s) => s.closeLog()));
    lap("teardown", await this.removeSandbox());
    const body: FactBody = { type: "suspended", warm: false, ...saved, ...(usage ? { usage } : {}) };
    this.releasedBy = body;
    lap("fact", await this.emit(body, requestId));
    this.deps.log.info({ ...this.ids(), ms: took }, "session suspended cold");
  }

  async checkpoint(requestId: string, base?: readonly string[]): Promise<void> {
    this.require("running", "frozen", "exited");
    const saved = await saveCheckpoint(this.deps, this.held, this.workspace, requestId, this.sandbox?.user, base);
    await this.emit({ type: "checkpointed", requestId, ...saved }, requestId);
  }

  /** Runs a workspace operation (push, pull, diff) after every earlier command, while the sandbox is live (running or warm-suspended); refused otherwise. */
  workspaceTask<T>(fn: (workspace: string, user: SandboxUser | undefined) => Promise<T>): Promise<T> {
    return this.run(async () => {
      this.require("running", "frozen");
      return fn(this.workspace, this.sandbox?.user);
    });
  }

  /** Runs fn on the session's exec'd processes after every earlier command, while it runs; refused otherwise. */
  execTask<T>(fn: (execs: SessionExecs) => Promise<T>): Promise<T> {
    return this.run(async () => {
      this.require("running");
      return fn(this.execs as SessionExecs);
    });
  }

  /** A connection to a declared port of the running session (a preview's tunnel); not_found for an undeclared one (or a private one, publicOnly). */
  connectPort(port: number, publicOnly = false): Promise<Duplex> {
    return this.run(async () => {
      this.require("running");
      if (!declaredPorts(this.cmd.spec).some((p) => p.port === port && (p.public || !publicOnly))) throw new NotFoundError("port");
      return (this.sandbox as Sandbox).connectPort(port);
    });
  }

  /** The exec'd processes now (listing, signals, input and credit do not wait for earlier commands). */
  get execTable(): SessionExecs | undefined {
    return this.execs;
  }

  /** After a push: a running watch session reloads (debounced with the watcher, rate limited); false otherwise. */
  requestReload(): boolean {
    if (this.mode !== "watch" || this.phase !== "running") return false;
    this.watcher?.poke();
    return true;
  }

  /** Stops the app's current generation (if any) and starts the next with trigger; its run fact names the request. */
  async restartApp(app: string, trigger: RunTrigger, requestId?: string): Promise<void> {
    this.require("running");
    const slot = this.slots.get(app);
    if (!slot) throw new CommandRefusedError(`unknown app ${app.slice(0, 64)}`);
    await this.restart([slot], trigger, requestId);
  }

  /** Destroy: kill the apps (their logs end with exit markers), remove the sandbox; no exited fact. */
  async destroy(): Promise<void> {
    await this.end();
    await this.removeSandbox();
  }

  /** The placement went to a successor (a re-registration's destroy): apps killed, sandbox removed, without a word (no exit markers, no facts): the record and the log are the successor's. */
  async discard(): Promise<void> {
    this.facts.silence();
    this.abort.abort();
    this.phase = "ending";
    this.detach();
    this.abortWriters();
    await this.execs?.discardAll();
    await this.killAll();
    await this.removeSandbox();
    this.deps.log.info(this.ids(), "session discarded after re-registration");
  }

  /** After a re-registration that kept this placement: states again what the old runner generation's fence drops (SessionFacts.restate). */
  restate(recordState?: SessionState): void {
    this.facts.restate(this.phase, recordState, (key) => void this.reportExited(key));
  }

  /** A start redelivered for this placement: states running again under the current generation (SessionFacts.restateRunning). */
  restateRunning(): void {
    this.facts.restateRunning(this.phase);
  }

  /** Agent shutdown: kill the apps, append their markers, report exited (the sandbox is gone with the agent). */
  async shutdown(): Promise<void> {
    const reportable = this.phase === "running" || this.phase === "frozen";
    await this.end();
    if (reportable) await this.reportExited();
  }

  /** Shutdown with the bus gone: writers stop retrying. */
  abortWriters(): void {
    for (const slot of this.slots.values()) slot.abortLog();
  }

  private async end(): Promise<void> {
    this.abort.abort();
    this.phase = "ending";
    this.detach();
    await this.killAll();
    await Promise.all([...this.slots.values()].map((s) => s.endLog()));
  }

  private async restart(slots: AppSlot[], trigger: RunTrigger, requestId?: string): Promise<void> {
    this.restarting += 1;
    try {
      for (const slot of slots) {
        const end = await slot.stop();
        if (end) void this.facts.reportEnd(slot, end);
      }
      for (const slot of slots) void this.facts.reportRun(slot, (await slot.start(trigger)).run, requestId);
    } finally {
      this.restarting -= 1;
    }
    this.maybeExit();
  }

  /** Watch mode: reloads every app on a workspace change (session-watch.ts). */
  private watchWorkspace(): WatchReloader {
    return watchSessionWorkspace(this.deps, this.workspace, this.ids(), () =>
      this.run(async () => {
        if (this.phase === "running") await this.restart([...this.slots.values()], "watch");
        // Changed while warm-suspended: the reload happens on resume, not never.
        else if (this.phase === "frozen") this.reloadOnResume = true;
      }),
    );
  }

  /** Watch mode: no reload under way, due or deferred, and no app settling (tests wait for it). */
  get reloadQuiet(): boolean {
    return this.watcher?.quiet ?? true;
  }

  private onAppEnded(slot: AppSlot, end: GenerationEnd): void {
    void this.facts.reportEnd(slot, end);
    // Watch mode: a completed app waits for the next change; the session goes on.
    if (this.mode !== "run" || this.phase === "ending") return;
    void slot.endLog();
    this.maybeExit();
  }

  /** Run mode: once every app ended and no restart is under way, report exited with the first app's code. */
  private maybeExit(): void {
    if (this.mode !== "run" || (this.phase !== "running" && this.phase !== "frozen") || this.restarting > 0) return;
    const slots = [...this.slots.values()];
    if (slots.some((s) => s.running)) return;
    this.phase = "exited";
    this.detach();
    void (async () => {
      await Promise.all(slots.map((s) => s.endLog()));
      await this.reportExited();
    })();
  }

  private async reportExited(key?: string): Promise<void> {
    const first = [...this.slots.values()][0]?.lastExit ?? { exitCode: null, signal: undefined };
    const usage = await this.finishUsage();
    await this.emit({ type: "exited", exitCode: first.exitCode, ...(first.signal ? { signal: first.signal } : {}), ...(usage ? { usage } : {}) }, key);
    this.deps.log.info({ ...this.ids(), exitCode: first.exitCode, signal: first.signal }, "session exited");
  }

  private async killAll(): Promise<void> {
    await this.execs?.endAll();
    await Promise.all([...this.slots.values()].map((s) => s.stop()));
    await this.sandbox?.killLeftovers();
  }

  /** Removes the sandbox (its directory, and what the backend held for it); just the directory when none was made. */
  private async removeSandbox(): Promise<void> {
    this.deps.checkpoints.forget(this.workspace);
    await (this.sandbox ? this.sandbox.destroy() : this.deps.sandbox.removeDir(this.dir));
  }

  private detach(): void {
    this.input?.unsubscribe();
    this.input = undefined;
    this.watcher?.close();
    this.watcher = undefined;
    this.egress.stop();
  }

  private require(...phases: Phase[]): void {
    requirePhase(this.phase, ...phases);
  }

  private ids() {
    return { sessionId: this.held.sessionId, placementGeneration: this.held.placementGeneration };
  }
}
