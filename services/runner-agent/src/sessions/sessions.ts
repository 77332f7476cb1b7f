import { join } from "node:path";
import type { DispatchCommand } from "@paddock/contracts";
import { RunnerError } from "../errors.ts";
import type { HeldSession, KeptSession } from "@paddock/contracts";
import type { SessionRuntimeDeps, StartCommand } from "./session-deps.ts";
import { SessionRuntime } from "./session-runtime.ts";
import { ReleasedPlacements } from "../fleet/released.ts";

export interface SessionManagerOptions extends SessionRuntimeDeps {
  dataDir: string;
}

type SessionCommand = Exclude<DispatchCommand, { type: "start" } | { type: "destroy" }>;

/** How many ended sessions are remembered, so a redelivered start never runs one twice. */
const TOMBSTONES = 10_000;

/**
 * The sessions of this runner. Dispatch is handled without waiting: each
 * command is queued on its session (commands of one session run in order,
 * sessions run independently), so a long setup never holds up the others.
 */
export class SessionManager {
  private readonly sessions = new Map<string, SessionRuntime>();
  /** sessionId → the placement generation that ended here (failed, destroyed, suspended cold). */
  private readonly ended = new Map<string, number>();
  /** sessionId → the teardown of a placement being replaced; the next boot waits for it. */
  private readonly closing = new Map<string, Promise<void>>();
  private readonly inflight = new Set<Promise<void>>();
  private readonly released: ReleasedPlacements;

  constructor(private readonly opts: SessionManagerOptions) {
    this.released = new ReleasedPlacements(opts.now);
  }

  /** What a registration lists: the sandboxes held, and the placements a cold suspend released recently (released.ts). */
  held(): HeldSession[] {
    const released = this.released.list().flatMap((r) => (this.sessions.has(r.held.sessionId) ? [] : [r.held]));
    return [...[...this.sessions.values()].map((s) => s.held), ...released];
  }

  /** Placements held since `before` or earlier. */
  heldSince(before: number): HeldSession[] {
    return [...this.sessions.values()].filter((s) => s.heldSince <= before).map((s) => s.held);
  }

  /** The runtime holding a session here, if any. */
  get(sessionId: string): SessionRuntime | undefined {
    return this.sessions.get(sessionId);
  }

  sessionsDir(): string {
    return join(this.opts.dataDir, "sessions");
  }

  /**
   * Reconciles the host with what this runner holds: kills every process
   * still working in the directory of a session it does not hold (nor is
   * tearing down), however it got there. Teardown kills a session's
   * processes; this catches what slipped past it (found by `pnpm chaos`: a
   * sandbox process outliving its destroyed session after a runner restart).
   */
  reapStrays(): Promise<number> {
    return this.opts.sandbox.reapStrays(this.sessionsDir(), (name) => this.sessions.has(name) || this.closing.has(name));
  }

  /** Routes one (runner-generation-checked) command; the work continues in the background. */
  dispatch(cmd: DispatchCommand): void {
    switch (cmd.type) {
      case "start":
        this.start(cmd);
        return;
      case "destroy":
        this.track(this.destroy(cmd));
        return;
      default:
        this.command(cmd);
    }
  }

  /** Resolves once every queued command has finished. */
  async idle(): Promise<void> {
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
  }

  /**
   * Idempotent by (session, placement generation): a redelivered start boots
   * nothing, but may state running again (SessionRuntime.restateRunning).
   */
  private start(cmd: StartCommand): void {
    const existing = this.sessions.get(cmd.sessionId);
    if (existing && existing.held.placementGeneration === cmd.placementGeneration) return existing.restateRunning();
    if (existing && existing.held.placementGeneration > cmd.placementGeneration) return;
    if ((this.ended.get(cmd.sessionId) ?? 0) >= cmd.placementGeneration) return;
    this.released.forget(cmd.sessionId);
    // An older placement of the same session here is superseded by this one.
    const prior = existing ? this.teardown(existing) : this.closing.get(cmd.sessionId);
    const runtime = new SessionRuntime(this.opts, cmd, join(this.sessionsDir(), cmd.sessionId));
    this.sessions.set(cmd.sessionId, runtime);
    this.opts.metrics.sessions.set(this.sessions.size);
    this.track(
      runtime.run(async () => {
        await prior;
        if (!(await runtime.boot()) && !runtime.abort.signal.aborted) this.forget(runtime);
      }),
    );
  }

  /** Kills the session's processes, removes its directory, reports destroyed. */
  private async destroy(target: HeldSession): Promise<void> {
    const existing = this.sessions.get(target.sessionId);
    if (existing && existing.held.placementGeneration > target.placementGeneration) return; // for an older placement
    if ((this.ended.get(target.sessionId) ?? 0) > target.placementGeneration) return;
    // Measured before the sandbox goes; undefined when the exit already reported it.
    const usage = existing ? await existing.finishUsage() : undefined;
    if (existing) await this.teardown(existing);
    else {
      await this.closing.get(target.sessionId);
      await this.opts.sandbox.removeDir(join(this.sessionsDir(), target.sessionId));
    }
    this.remember(target);
    await this.opts.facts.publish(target, { type: "destroyed", ...(usage ? { usage } : {}) });
  }

  /**
   * After a re-registration: the sessions in the reply's destroy belong to a
   * successor now. Their processes are killed and sandboxes removed, with no
   * exit markers and no facts. Resolves once all are gone.
   */
  async discard(targets: HeldSession[]): Promise<void> {
    await Promise.all(
      targets.map(async (target) => {
        const existing = this.sessions.get(target.sessionId);
        this.remember(target);
        if (!existing || existing.held.placementGeneration > target.placementGeneration) return;
        existing.abort.abort();
        const done = existing
          .run(() => existing.discard())
          .finally(() => {
            this.forget(existing);
            if (this.closing.get(target.sessionId) === done) this.closing.delete(target.sessionId);
          });
        this.closing.set(target.sessionId, done);
        this.track(done);
        await done.catch(() => undefined);
      }),
    );
  }

  /**
   * After a re-registration: the kept sessions state again what the old
   * generation's facts may have lost, given what their records show (`kept`,
   * absent from a scheduler that does not say).
   */
  restate(kept?: readonly KeptSession[]): void {
    const states = new Map((kept ?? []).map((k) => [`${k.sessionId}.${k.placementGeneration}`, k.state]));
    const stateOf = (h: HeldSession) => states.get(`${h.sessionId}.${h.placementGeneration}`);
    for (const s of this.sessions.values()) s.restate(stateOf(s.held));
    if (!kept) return;
    for (const r of this.released.list()) {
      const state = stateOf(r.held);
      // Not kept: the record moved on (it has the fact, or is placed anew).
      if (state === undefined) this.released.forget(r.held.sessionId);
      else if (state === "running" || state === "suspended_warm") void this.opts.facts.publish(r.held, r.body, `r${this.opts.facts.generation()}`);
    }
  }

  /**
   * suspend, resume, checkpoint, restart_app: fenced by placement generation
   * (a command for another placement is ignored), refused when this runner
   * cannot do it.
   */
  private command(cmd: SessionCommand): void {
    const runtime = this.sessions.get(cmd.sessionId);
    const held: HeldSession = { sessionId: cmd.sessionId, workspaceId: cmd.workspaceId, placementGeneration: cmd.placementGeneration };
    if (runtime ? runtime.held.placementGeneration !== cmd.placementGeneration : (this.ended.get(cmd.sessionId) ?? 0) > cmd.placementGeneration) {
      this.opts.metrics.staleDispatch.inc();
      this.opts.log.info({ sessionId: cmd.sessionId, type: cmd.type, placementGeneration: cmd.placementGeneration }, "command for another placement ignored");
      return;
    }
    if (!runtime) {
      this.track(this.refuse(held, cmd, "session is not held by this runner").then(() => undefined));
      return;
    }
    this.track(
      runtime.run(async () => {
        try {
          await this.perform(runtime, cmd);
        } catch (err) {
          if (!(err instanceof RunnerError)) this.opts.log.error({ err, sessionId: cmd.sessionId, type: cmd.type }, "command failed");
          await this.refuse(held, cmd, err instanceof RunnerError ? err.message : "command failed", runtime);
        }
      }),
    );
  }

  private async perform(runtime: SessionRuntime, cmd: SessionCommand): Promise<void> {
    switch (cmd.type) {
      case "suspend":
        if (cmd.warm) return runtime.suspendWarm(cmd.requestId);
        await runtime.suspendCold(cmd.requestId, cmd.base);
        this.forget(runtime);
        if (runtime.releasedBy) this.released.add(runtime.held, runtime.releasedBy);
        return;
      case "resume":
        return runtime.resumeWarm(cmd.requestId);
      case "checkpoint":
        return runtime.checkpoint(cmd.requestId, cmd.base);
      case "restart_app":
        return runtime.restartApp(cmd.app, cmd.trigger, cmd.requestId);
    }
  }

  private async refuse(held: HeldSession, cmd: SessionCommand, reason: string, runtime?: SessionRuntime): Promise<boolean> {
    this.opts.metrics.refusedCommands.inc({ type: cmd.type });
    this.opts.log.info({ sessionId: cmd.sessionId, type: cmd.type, requestId: cmd.requestId, reason }, "command refused");
    const body = { type: "refused", requestId: cmd.requestId, reason: reason.slice(0, 512) } as const;
    return runtime ? runtime.emit(body, cmd.requestId) : this.opts.facts.publish(held, body, cmd.requestId);
  }

  /** Shutdown: kill every session; their exit markers and exited facts go out while the bus is up. */
  async stopAll(): Promise<void> {
    await Promise.all(
      [...this.sessions.values()].map((s) => {
        s.abort.abort();
        return s.run(() => s.shutdown());
      }),
    );
    await this.idle();
  }

  /** Shutdown with the bus gone: writers stop retrying so nothing waits on them. */
  abortWriters(): void {
    for (const s of this.sessions.values()) s.abortWriters();
  }

  private teardown(runtime: SessionRuntime): Promise<void> {
    runtime.abort.abort();
    const done = runtime
      .run(() => runtime.destroy())
      .finally(() => {
        this.forget(runtime);
        if (this.closing.get(runtime.held.sessionId) === done) this.closing.delete(runtime.held.sessionId);
      });
    this.closing.set(runtime.held.sessionId, done);
    return done;
  }

  /** The runtime no longer holds a sandbox here; later commands for its placement are refused or ignored. */
  private forget(runtime: SessionRuntime): void {
    if (this.sessions.get(runtime.held.sessionId) === runtime) this.sessions.delete(runtime.held.sessionId);
    this.remember(runtime.held);
    this.opts.metrics.sessions.set(this.sessions.size);
  }

  private remember(held: HeldSession): void {
    if ((this.ended.get(held.sessionId) ?? 0) > held.placementGeneration) return;
    this.ended.delete(held.sessionId);
    this.ended.set(held.sessionId, held.placementGeneration);
    if (this.ended.size > TOMBSTONES) {
      const oldest = this.ended.keys().next();
      if (!oldest.done) this.ended.delete(oldest.value);
    }
  }

  private track(work: Promise<void>): void {
    const p = work.catch((err: unknown) => this.opts.log.error({ err }, "session work failed"));
    this.inflight.add(p);
    void p.finally(() => this.inflight.delete(p));
  }
}
