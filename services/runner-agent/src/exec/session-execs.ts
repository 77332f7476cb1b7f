import type { JetStreamClient } from "@nats-io/jetstream";
import { ConflictError, InvalidError, MAX_SESSION_EXECS, NotFoundError, Subjects, type ExecList, type ExecStartRequest } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { SpawnError } from "../errors.ts";
import type { Sandbox } from "../sandbox/backend.ts";
import type { AppProcess } from "../sandbox/process-group.ts";
import { ExecLog } from "./exec-log.ts";
import { ExecProcess } from "./exec-process.ts";

/** Ended processes kept for listing (the newest), beside the running ones. */
const KEEP_ENDED = 32;

export interface SessionExecsDeps {
  js: JetStreamClient;
  poolId: string;
  runnerId: string;
  sessionId: string;
  placementGeneration: number;
  sandbox: Sandbox;
  env: Readonly<Record<string, string>>;
  now: () => number;
  readerTimeoutMs: number;
  setTimer: (fn: () => void, ms: number) => { cancel(): void };
  log: Logger;
  /** An exec started or its output was committed: the session is in use (the runner's activity report, the idle policy's input). */
  onActivity?: () => void;
  /** Is cwd (workspace-relative) a directory of the workspace, reached without a symlink? */
  isWorkspaceDir: (cwd: string) => Promise<boolean>;
}

/**
 * The exec'd processes of one session placement: started, signalled, fed
 * and listed by id; their freeze, thaw, usage and end go with the session's
 * apps (`procs()`), and none outlives the placement.
 */
export class SessionExecs {
  private readonly byId = new Map<string, ExecProcess>();
  private ended: ExecProcess[] = [];
  private closed = false;

  constructor(private readonly deps: SessionExecsDeps) {}

  async start(req: ExecStartRequest): Promise<ExecProcess> {
    if (this.closed) throw new ConflictError("session is ending");
    if (this.byId.has(req.execId)) throw new ConflictError("an exec of that id exists");
    const running = [...this.byId.values()].filter((p) => p.running).length;
    if (running >= MAX_SESSION_EXECS) throw new ConflictError(`the session runs ${MAX_SESSION_EXECS} exec'd processes already`);
    if (req.cwd !== "" && !(await this.deps.isWorkspaceDir(req.cwd))) throw new InvalidError("cwd is not a directory of the workspace");
    const d = this.deps;
    let proc: ExecProcess;
    try {
      proc = new ExecProcess(
        {
          sandbox: d.sandbox,
          env: d.env,
          now: d.now,
          readerTimeoutMs: d.readerTimeoutMs,
          setTimer: d.setTimer,
          log: (setPaused) =>
            new ExecLog({
              js: d.js,
              subject: Subjects.exec(d.poolId, d.runnerId, d.sessionId, req.execId),
              idPrefix: `${d.sessionId}.${req.execId}.${d.placementGeneration}`,
              attached: req.attached,
              setPaused,
              onPublished: d.onActivity,
              onPublishError: (err) => d.log.warn({ err, sessionId: d.sessionId, execId: req.execId }, "exec output publish failed; retrying"),
            }),
        },
        req,
      );
    } catch (err) {
      // Fact-safe already (the command's first word, bounded); a command that is not there is the caller's mistake.
      if (err instanceof SpawnError) throw new InvalidError(err.message.replace(/^app exec: /, ""), { cause: err });
      throw err;
    }
    this.byId.set(proc.id, proc);
    d.onActivity?.();
    void proc.ended.then(() => this.retire(proc));
    return proc;
  }

  get(execId: string): ExecProcess {
    const proc = this.byId.get(execId);
    if (!proc) throw new NotFoundError("process");
    return proc;
  }

  /** The credit of a reader (unknown ids are ignored: the process may have ended and been retired). */
  credit(execId: string, bytes: number): boolean {
    const proc = this.byId.get(execId);
    proc?.credit(bytes);
    return proc !== undefined;
  }

  list(): ExecList {
    return { processes: [...this.byId.values()].map((p) => p.info()).sort((a, b) => a.startedAt - b.startedAt) };
  }

  /** The running processes, for the session's freeze, thaw and usage. */
  procs(): AppProcess[] {
    return [...this.byId.values()].filter((p) => p.running).map((p) => p.appProcess);
  }

  /** The session ends: every process is terminated and its exit written. */
  async endAll(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.byId.values()].map((p) => p.terminate()));
  }

  /** The placement is lost: kill without writing more (the log is nobody's now). */
  async discardAll(): Promise<void> {
    this.closed = true;
    for (const p of this.byId.values()) p.abortLog();
    await Promise.all([...this.byId.values()].map((p) => p.terminate()));
  }

  private retire(proc: ExecProcess): void {
    this.ended.push(proc);
    while (this.ended.length > KEEP_ENDED) {
      const old = this.ended.shift() as ExecProcess;
      this.byId.delete(old.id);
    }
  }
}
