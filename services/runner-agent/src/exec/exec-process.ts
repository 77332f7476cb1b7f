import { ConflictError, EXEC_INLINE_MAX_BYTES, type ExecDone, type ExecExit, type ExecProcessInfo, type ExecSignal, type ExecStartRequest } from "@paddock/contracts";
import type { Sandbox } from "../sandbox/backend.ts";
import type { AppProcess } from "../sandbox/process-group.ts";
import type { ExecLog } from "./exec-log.ts";

/** Stdin bytes queued for a process (not yet read by it) past which a write is refused. */
const STDIN_QUEUE_MAX_BYTES = 4 * 1024 * 1024;
/** Time a process is given between SIGTERM and SIGKILL when its session ends. */
const END_GRACE_MS = 2_000;

export interface ExecProcessDeps {
  sandbox: Sandbox;
  /** The session's own environment (its apps'); the request's variables go over it. */
  env: Readonly<Record<string, string>>;
  /** Builds the process's log; setPaused reaches the process once it started. */
  log: (setPaused: (paused: boolean) => void) => ExecLog;
  now: () => number;
  /** An attached process whose reader stayed silent this long has lost it. */
  readerTimeoutMs: number;
  /** Timers (injected: tests drive them). */
  setTimer: (fn: () => void, ms: number) => { cancel(): void };
}

/**
 * One exec'd command in a session's sandbox: a process without a PTY (the
 * session's uid, namespaces, limits and egress, as its apps), its output on
 * its log, stdin from the request (then closed, unless a background process
 * keeps it open), a timeout that kills its whole process group and says so,
 * and, while a reader is attached, a watch on the reader's credit: a reader
 * that went silent (the client left, its gateway died) takes the command with it.
 */
export class ExecProcess {
  readonly id: string;
  readonly startedAt: number;
  readonly ended: Promise<ExecExit>;
  /** The exit as soon as it is known, before its log record is written (ended waits for that). */
  private readonly exitKnown: Promise<ExecExit>;
  private resolveExit!: (exit: ExecExit) => void;
  private readonly proc: AppProcess;
  private readonly log: ExecLog;
  private exit: ExecExit | undefined;
  private timedOut = false;
  /** The reader was heard (credit) since the last check: starts heard, the start request being its first word. */
  private heard = true;
  private readonly timers: Array<{ cancel(): void }> = [];
  /** A buffered caller's copy of the output (req.inlineWaitMs), until it grows past EXEC_INLINE_MAX_BYTES. */
  private inline: { parts: Record<"stdout" | "stderr", Uint8Array[]>; bytes: number } | undefined;

  constructor(
    private readonly deps: ExecProcessDeps,
    private readonly req: ExecStartRequest,
  ) {
    this.id = req.execId;
    this.startedAt = deps.now();
    let proc: AppProcess | undefined;
    let pausedEarly = false;
    this.log = deps.log((paused) => (proc ? proc.setPaused(paused) : (pausedEarly = paused)));
    const env = { ...deps.env, ...req.env };
    if (req.inlineWaitMs !== undefined) this.inline = { parts: { stdout: [], stderr: [] }, bytes: 0 };
    proc = deps.sandbox.startExec({ app: { name: "exec", cmd: req.cmd, tty: false }, env, cwd: req.cwd, onData: (bytes, stream) => this.output(bytes, stream ?? "stdout") });
    if (pausedEarly) proc.setPaused(true);
    this.proc = proc;
    if (req.stdin.length > 0) proc.input.push(Buffer.from(req.stdin, "base64"));
    if (!req.keepStdinOpen) this.closeStdinWhenWritten();
    if (req.timeoutMs !== undefined) this.timers.push(deps.setTimer(() => this.kill(true), req.timeoutMs));
    if (req.attached) this.watchReader();
    this.exitKnown = new Promise((resolve) => (this.resolveExit = resolve));
    this.ended = this.finish();
  }

  /**
   * The command's exit and whole output when it ends within waitMs and its
   * output stayed within EXEC_INLINE_MAX_BYTES (a start's inline answer);
   * undefined otherwise (the caller reads the log).
   */
  async inlineDone(waitMs: number): Promise<ExecDone | undefined> {
    let timer: { cancel(): void } | undefined;
    const late = new Promise<undefined>((resolve) => (timer = this.deps.setTimer(() => resolve(undefined), waitMs)));
    const exit = await Promise.race([this.exitKnown, late]);
    timer?.cancel();
    const inline = this.inline;
    this.inline = undefined;
    if (exit === undefined || inline === undefined) return undefined;
    const text = (stream: "stdout" | "stderr") => Buffer.concat(inline.parts[stream]).toString("base64");
    return { exit, stdout: text("stdout"), stderr: text("stderr") };
  }

  get running(): boolean {
    return this.exit === undefined;
  }

  info(): ExecProcessInfo {
    return { id: this.id, cmd: [...this.req.cmd], startedAt: this.startedAt, background: !this.req.attached, ...(this.exit ? { exit: this.exit } : {}) };
  }

  /** The reader's credit (ExecCredit): also proof it is still there. */
  credit(bytes: number): void {
    this.heard = true;
    this.log.credit(bytes);
  }

  /** Sends sig to the whole process group; false once it ended. */
  signal(sig: ExecSignal): boolean {
    if (!this.running) return false;
    if (sig === "SIGSTOP") this.proc.freeze();
    else if (sig === "SIGCONT") this.proc.thaw();
    else this.proc.signal(sig);
    return true;
  }

  /** Queues bytes for stdin (then closes it on eof); answers how many were taken (0 once stdin closed). */
  write(bytes: Uint8Array, eof: boolean): number {
    const input = this.proc.input;
    if (input.closed) return 0;
    // Bounded: a process that does not read is told to the writer, who may retry, instead of growing the runner.
    if (input.queuedBytes + bytes.byteLength > STDIN_QUEUE_MAX_BYTES) throw new ConflictError(`the process is not reading its stdin (${input.queuedBytes} bytes wait)`);
    const taken = bytes.byteLength > 0 && input.push(bytes) ? bytes.byteLength : 0;
    if (eof) this.closeStdinWhenWritten();
    return taken;
  }

  /** Kills the whole group (the timeout, a lost reader): SIGKILL at once. */
  kill(timedOut = false): void {
    if (!this.running) return;
    if (timedOut) this.timedOut = true;
    this.proc.signal("SIGKILL");
  }

  /** The session ends: SIGTERM, then SIGKILL after a grace; resolves with its exit. */
  async terminate(): Promise<ExecExit> {
    if (this.running) await this.proc.terminate(END_GRACE_MS);
    return this.ended;
  }

  /** The session's apps' freeze and thaw reach exec'd processes too (warm suspend). */
  get appProcess(): AppProcess {
    return this.proc;
  }

  /** Stops publishing (the runner lost the placement): no exit is written. */
  abortLog(): void {
    this.log.abort();
  }

  private output(bytes: Uint8Array, stream: "stdout" | "stderr"): void {
    const inline = this.inline;
    if (inline) {
      inline.bytes += bytes.byteLength;
      // Copied: the log may hold on to the chunk, the inline answer is built later.
      if (inline.bytes <= EXEC_INLINE_MAX_BYTES) inline.parts[stream].push(Uint8Array.prototype.slice.call(bytes));
      else this.inline = undefined;
    }
    this.log.append(bytes, stream);
  }

  private closeStdinWhenWritten(): void {
    this.proc.endInput();
  }

  /**
   * Checks every readerTimeoutMs that the reader was heard since the last check
   * (ticks, not the clock: a reader silent for one whole period, up to two, has gone).
   */
  private watchReader(): void {
    const check = () => {
      if (!this.running) return;
      if (!this.heard) {
        this.kill();
        return;
      }
      this.heard = false;
      this.timers.push(this.deps.setTimer(check, this.deps.readerTimeoutMs));
    };
    this.timers.push(this.deps.setTimer(check, this.deps.readerTimeoutMs));
  }

  private async finish(): Promise<ExecExit> {
    const ended = await this.proc.exited;
    for (const t of this.timers) t.cancel();
    const exit: ExecExit = {
      exitCode: ended.exitCode,
      signal: ended.signal ?? null,
      durationMs: Math.max(0, Math.round(this.deps.now() - this.startedAt)),
      timedOut: this.timedOut,
    };
    this.exit = exit;
    this.resolveExit(exit);
    await this.log.finish(exit);
    return exit;
  }
}
