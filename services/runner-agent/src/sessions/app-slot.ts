import type { AppRun, AppSpec, RunTrigger } from "@paddock/contracts";
import type { AppExit, AppProcess } from "../sandbox/process-group.ts";
import type { Sandbox } from "../sandbox/backend.ts";
import { SpawnError } from "../errors.ts";
import type { ScreenTracker } from "../terminal/screen-tracker.ts";
import type { TermWriter } from "../terminal/term-writer.ts";

/** How one generation ended: the run as it should be reported, and how long it ran. */
export interface GenerationEnd {
  exit: AppExit;
  run: AppRun;
  durationMs: number;
}

export type GenerationStart = { ok: true; run: AppRun } | { ok: false; run: AppRun };

export interface AppSlotDeps {
  /** Where each generation starts (in the sandbox's workspace). */
  sandbox: Pick<Sandbox, "startApp">;
  env: Record<string, string>;
  /** One writer for every generation of the placement: chunk ids stay unique across restarts. */
  writer: TermWriter;
  /** The app's screen checkpoints (fed by the writer); none when they are off. */
  screen?: ScreenTracker | undefined;
  now: () => number;
  killGraceMs: number;
  /** A generation ended by itself (not by stop()). */
  onEnded: (slot: AppSlot, end: GenerationEnd) => void;
}

interface Current {
  proc: AppProcess;
  run: AppRun;
  stopping: boolean;
  ended: Promise<GenerationEnd>;
}

/**
 * One app of a session across its generations (1, 2, …): starts the next
 * one, stops the current one, and owns the app's terminal log. Reports
 * nothing itself; the session decides which facts and markers follow.
 */
export class AppSlot {
  generation = 0;
  lastExit: AppExit | undefined;
  private current: Current | undefined;
  private logSettled: Promise<void> = Promise.resolve();
  private logEnded = false;

  constructor(
    readonly spec: AppSpec,
    private readonly deps: AppSlotDeps,
  ) {}

  get name(): string {
    return this.spec.name;
  }

  get proc(): AppProcess | undefined {
    return this.current?.proc;
  }

  get running(): boolean {
    return this.current !== undefined;
  }

  /** Starts the next generation; a command that cannot start gives a failed run instead. */
  async start(trigger: RunTrigger): Promise<GenerationStart> {
    await this.logSettled;
    this.deps.writer.reopen();
    this.logEnded = false;
    this.generation += 1;
    const startedAt = this.deps.now();
    const base = { generation: this.generation, trigger, startedAt };
    let proc: AppProcess;
    try {
      const { writer } = this.deps;
      proc = withResizeNotice(
        this.deps.sandbox.startApp({ app: this.spec, env: this.deps.env, size: writer.size, onData: (bytes, stream) => writer.append(bytes, stream) }),
        writer,
        this.spec.tty !== false,
      );
    } catch (err) {
      const reason = err instanceof SpawnError ? err.message : `app ${this.spec.name}: could not start`;
      return { ok: false, run: { ...base, phase: "failed", reason, endedAt: this.deps.now() } };
    }
    this.deps.writer.setPressureHandler((paused) => proc.setPaused(paused));
    // Input reaching the app: what it prints in answer (a keystroke's echo) is published at once rather than coalesced.
    proc.input.onWrite = () => this.deps.writer.noteInput();
    const run: AppRun = { ...base, phase: "running" };
    const cur: Current = { proc, run, stopping: false, ended: undefined as unknown as Promise<GenerationEnd> };
    cur.ended = proc.exited.then((exit) => {
      const endedAt = this.deps.now();
      this.lastExit = exit;
      if (this.current === cur) this.current = undefined;
      const end: GenerationEnd = { exit, durationMs: Math.max(0, endedAt - startedAt), run: endedRun(run, exit, cur.stopping, endedAt) };
      if (!cur.stopping) this.deps.onEnded(this, end);
      return end;
    });
    this.current = cur;
    return { ok: true, run };
  }

  /** Stops the current generation (SIGTERM, SIGKILL after the grace); undefined when none runs. */
  async stop(): Promise<GenerationEnd | undefined> {
    const cur = this.current;
    if (!cur) return undefined;
    cur.stopping = true;
    await cur.proc.terminate(this.deps.killGraceMs);
    return cur.ended;
  }

  /** Appends the exit marker once (the app's log ends here unless a later generation reopens it). */
  endLog(): Promise<void> {
    if (this.logEnded) return this.logSettled;
    this.logEnded = true;
    this.logSettled = this.deps.writer.finish(this.lastExit?.exitCode ?? null);
    this.settleScreen();
    return this.logSettled;
  }

  /** Flushes the log and closes it without a marker (a suspend is not an exit). */
  closeLog(): Promise<void> {
    this.logEnded = true;
    this.logSettled = this.deps.writer.close();
    this.settleScreen();
    return this.logSettled;
  }

  /** Once the log's last chunk is in, its final screen is checkpointed (not waited for: facts never wait on a screen). */
  private settleScreen(): void {
    const screen = this.deps.screen;
    if (screen) void this.logSettled.then(() => screen.settle());
  }

  /** The log's pending work settled (a marker being appended, say). */
  settled(): Promise<void> {
    return this.logSettled;
  }

  abortLog(): void {
    this.deps.writer.abort();
    this.deps.screen?.abort();
  }
}

/**
 * How a generation ended, as reported: killed by a signal it did not get from
 * this runner (a crash, the OOM killer, `kill -9`) is failed with that
 * signal; a stop the runner made (restart, reload, teardown) or an exit of
 * its own is completed, with the signal noted when there was one.
 */
export function endedRun(run: AppRun, exit: AppExit, stoppedByRunner: boolean, endedAt: number): AppRun {
  const signal = exit.signal !== undefined ? { signal: exit.signal } : {};
  if (exit.signal !== undefined && !stoppedByRunner) {
    return { ...run, phase: "failed", exitCode: null, ...signal, reason: `killed by ${exit.signal}`, endedAt };
  }
  return { ...run, phase: "completed", exitCode: exit.exitCode, ...signal, endedAt };
}

/**
 * Tells the log writer when the app's terminal is resized, so the log says at
 * which point (a piped app has no terminal to resize).
 */
function withResizeNotice(proc: AppProcess, writer: Pick<TermWriter, "resize">, tty: boolean): AppProcess {
  return {
    ...proc,
    // AppProcess values are plain objects (pid, input and exited are fixed at spawn): a spread copy is the same process.
    resize: (cols, rows) => {
      proc.resize(cols, rows);
      // After the PTY took the size: output read from here on may already be drawn for it.
      if (tty) writer.resize({ cols, rows });
    },
  };
}
