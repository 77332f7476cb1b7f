/**
 * A session's exec namespace (decision 0050): one sandbox, started through
 * the launch chain like any of the session's processes, whose pid 1 is
 * paddock-init; every exec'd command of the session is a fork of it. An exec
 * costs a frame and a fork instead of a launch of its own, and the session's
 * exec'd commands share one pid namespace: `ps` in one sees the others, a
 * background process started by one can be signalled by the next.
 *
 * The init runs as the session's user, so what it says is checked
 * (init-frames.ts) and believed only about its own commands: a lie costs the
 * session its own answers. It dies with its stdin (the runner, or destroy
 * closing it), and the kernel then ends every process of the namespace; a
 * dead init fails its commands as killed and the next exec starts a new one.
 */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { constants as osConstants } from "node:os";
import type { Logger } from "@paddock/logging";
import { SpawnError } from "../../errors.ts";
import { InputQueue } from "../input-queue.ts";
import { OutputStream, signalName, terminateGroup, type AppExit, type AppProcess } from "../process-group.ts";
import { decodeWaitStatus, encodeFrame, FrameReader, FromInit, InitProtocolError, startPayload, ToInit, u32Payload, type InitFrame } from "./init-frames.ts";
import type { SandboxLaunch } from "./launch.ts";
import { signalTree } from "./session-processes.ts";

/** Where the init binary is bound in every session's sandbox (read-only; /run is an empty tmpfs there). */
export const INIT_INSIDE = "/run/paddock-init";
/** Stdin bytes sent to the init and not yet written to the command, past which the queue waits. */
const STDIN_IN_FLIGHT_BYTES = 256 * 1024;
/** Stdin bytes per frame. */
const STDIN_FRAME_BYTES = 64 * 1024;
/** Bytes of the init's own stderr kept for the log (it only ever says why it died). */
const INIT_STDERR_BYTES = 1024;

export interface ExecStart {
  name: string;
  argv: readonly string[];
  env: Readonly<Record<string, string>>;
  /** Absolute, as the sandbox sees it. */
  cwd: string;
  onData: (bytes: Uint8Array, stream: OutputStream) => void;
}

/** A connection to a port on the sandbox's loopback, made by the init (a tunnel: exec-holder's `connect`). */
export interface HeldConnection {
  /** Resolves true once connected, false when it could not (then `exited` says errno as its exit code). */
  readonly connected: Promise<boolean>;
  readonly process: AppProcess;
}

interface Running {
  onFrame(frame: InitFrame): void;
  /** The init died: the command is gone with it. */
  lost(): void;
}

export interface ExecHolderDeps {
  /** The chain that starts the init in the session's sandbox (launch.ts, its command INIT_INSIDE, --as-pid-1). */
  launch: () => SandboxLaunch;
  log: Logger;
}

export class ExecHolder {
  private child: ChildProcessWithoutNullStreams | undefined;
  private readonly running = new Map<number, Running>();
  private nextId = 1;
  private closed = false;

  constructor(private readonly deps: ExecHolderDeps) {}

  /** Starts argv in the session's exec namespace (its init started first when there is none). */
  start(opts: ExecStart): AppProcess {
    if (this.closed) throw new SpawnError(`${opts.name}: the sandbox is gone`);
    const child = this.child ?? this.spawnInit();
    const id = this.nextId++;
    const proc = new HeldCommand(id, opts.name, (type, payload) => child.stdin.write(encodeFrame(type, id, payload)), opts.onData);
    this.running.set(id, proc);
    void proc.exited.then(() => this.running.delete(id));
    child.stdin.write(encodeFrame(ToInit.start, id, startPayload(opts.argv, opts.env, opts.cwd)));
    return proc;
  }

  /**
   * Connects to port on the sandbox's loopback from inside (as the session's
   * user, in its network namespace): its bytes are the returned process's
   * stdin and stdout; onDrained when the peer sent its last byte.
   */
  connect(port: number, onData: (bytes: Uint8Array) => void, onDrained: () => void): HeldConnection {
    if (this.closed) throw new SpawnError("tunnel: the sandbox is gone");
    const child = this.child ?? this.spawnInit();
    const id = this.nextId++;
    const proc = new HeldCommand(id, `port ${port}`, (type, payload) => child.stdin.write(encodeFrame(type, id, payload)), (bytes) => onData(bytes), onDrained);
    this.running.set(id, proc);
    void proc.exited.then(() => this.running.delete(id));
    child.stdin.write(encodeFrame(ToInit.tunnel, id, u32Payload(port)));
    return { connected: proc.started, process: proc };
  }

  /** SIGSTOP / SIGCONT to every process of the namespace, the init too (warm suspend). */
  freeze(): void {
    if (this.child?.pid !== undefined) signalTree(this.child.pid, "SIGSTOP");
  }

  thaw(): void {
    if (this.child?.pid !== undefined) signalTree(this.child.pid, "SIGCONT");
  }

  /** Ends the namespace: the init's stdin closes, the init kills everything and exits. Resolves once it did. */
  async close(): Promise<void> {
    this.closed = true;
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.stdin.end();
    // A frozen init reads nothing: let it go on so it sees the end.
    signalTree(child.pid ?? 0, "SIGCONT");
    await gone;
  }

  private spawnInit(): ChildProcessWithoutNullStreams {
    const launch = this.deps.launch();
    const child = spawn(launch.file, launch.args, { cwd: "/", env: launch.env, stdio: ["pipe", "pipe", "pipe"], detached: true });
    child.once("error", () => undefined);
    child.stdin.on("error", () => undefined);
    this.child = child;
    const reader = new FrameReader();
    child.stdout.on("data", (chunk: Buffer) => {
      let frames: InitFrame[];
      try {
        frames = reader.push(chunk);
      } catch (err) {
        this.deps.log.warn({ reason: err instanceof InitProtocolError ? err.message : String(err) }, "a session's exec init broke the frame protocol: killed");
        child.kill("SIGKILL");
        return;
      }
      for (const frame of frames) this.running.get(frame.id)?.onFrame(frame);
    });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => {
      if (stderr.length < INIT_STDERR_BYTES) stderr += chunk.toString("utf8").slice(0, INIT_STDERR_BYTES - stderr.length);
    });
    child.once("close", (code, signal) => {
      if (this.child === child) this.child = undefined;
      if (!this.closed) this.deps.log.warn({ code, signal, stderr: stderr.trim() }, "a session's exec init ended");
      for (const proc of [...this.running.values()]) proc.lost();
      this.running.clear();
    });
    return child;
  }
}

const signalNumbers: Readonly<Record<string, number>> = osConstants.signals;

/** One command the init forked: an AppProcess whose every act is a frame to the init. */
class HeldCommand implements AppProcess {
  readonly exited: Promise<AppExit>;
  readonly input: InputQueue;
  /** True once the init said it started (a command forked, a tunnel connected); false when it ended first. */
  readonly started: Promise<boolean>;
  private resolveExit!: (exit: AppExit) => void;
  private resolveStarted!: (started: boolean) => void;
  private done = false;
  private stdinOpen = true;
  private sent = 0;
  private written = 0;
  private innerPid = 0;

  constructor(
    private readonly id: number,
    readonly name: string,
    private readonly send: (type: (typeof ToInit)[keyof typeof ToInit], payload?: Uint8Array) => void,
    private readonly onData: (bytes: Uint8Array, stream: OutputStream) => void,
    private readonly onDrained: () => void = () => undefined,
  ) {
    this.exited = new Promise((resolve) => (this.resolveExit = resolve));
    this.started = new Promise((resolve) => (this.resolveStarted = resolve));
    this.input = new InputQueue({ tryWrite: (bytes) => this.tryWrite(bytes) });
  }

  /** The command's pid as its namespace sees it (0 until the init said). */
  get pid(): number {
    return this.innerPid;
  }

  onFrame(frame: InitFrame): void {
    if (this.done) return;
    switch (frame.type) {
      case FromInit.started:
        this.innerPid = frame.payload.readUInt32LE(0);
        this.resolveStarted(true);
        break;
      case FromInit.drained:
        this.onDrained();
        break;
      case FromInit.stdout:
        this.onData(frame.payload, OutputStream.stdout);
        break;
      case FromInit.stderr:
        this.onData(frame.payload, OutputStream.stderr);
        break;
      case FromInit.written:
        this.written += frame.payload.readUInt32LE(0);
        break;
      case FromInit.stdinClosed:
        this.stdinOpen = false;
        break;
      case FromInit.exit: {
        const { exitCode, signal } = decodeWaitStatus(frame.payload.readInt32LE(0));
        this.end({ exitCode, signal: signal === null ? undefined : signalName(signal) });
        break;
      }
    }
  }

  lost(): void {
    this.end({ exitCode: null, signal: "SIGKILL" });
  }

  resize(): void {}

  setPaused(paused: boolean): void {
    if (!this.done) this.send(ToInit.pause, Uint8Array.of(paused ? 1 : 0));
  }

  endInput(): void {
    this.input.whenBelow(0, () => {
      this.input.close();
      if (!this.done && this.stdinOpen) this.send(ToInit.stdin);
      this.stdinOpen = false;
    });
  }

  signal(sig: NodeJS.Signals): void {
    const num = signalNumbers[sig];
    if (!this.done && num !== undefined) this.send(ToInit.signal, u32Payload(num));
  }

  freeze(): void {
    this.signal("SIGSTOP");
  }

  thaw(): void {
    this.signal("SIGCONT");
  }

  terminate(graceMs: number): Promise<AppExit> {
    return terminateGroup((sig) => this.signal(sig), this.exited, graceMs);
  }

  /** Sends what fits in the stdin window; the queue retries the rest as the init says it was written. */
  private tryWrite(bytes: Uint8Array): number | "closed" {
    if (this.done || !this.stdinOpen) return "closed";
    const room = STDIN_IN_FLIGHT_BYTES - (this.sent - this.written);
    if (room <= 0) return 0;
    const take = Math.min(room, bytes.byteLength, STDIN_FRAME_BYTES);
    this.send(ToInit.stdin, bytes.subarray(0, take));
    this.sent += take;
    return take;
  }

  private end(exit: AppExit): void {
    if (this.done) return;
    this.done = true;
    this.input.close();
    this.resolveStarted(false);
    this.resolveExit(exit);
  }
}
