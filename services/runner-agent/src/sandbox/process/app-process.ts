import { accessSync, constants as fsConstants, statSync, writeSync } from "node:fs";
import { delimiter, isAbsolute, join, resolve } from "node:path";
import { spawn as spawnPty, type IPty } from "@lydell/node-pty";
import { INITIAL_TERMINAL_SIZE, type AppSpec, type TerminalSize } from "@paddock/contracts";
import { SpawnError } from "../../errors.ts";
import { InputQueue, type InputSink } from "../input-queue.ts";
import { spawnPiped } from "./pipe-process.ts";
import { signalGroup, signalName, terminateGroup, type AppExit, type AppProcess, type OutputStream } from "../process-group.ts";

export type { AppExit, AppProcess } from "../process-group.ts";

export interface SpawnAppOptions {
  app: AppSpec;
  cwd: string;
  env: Record<string, string>;
  /** stream is set for piped apps only. */
  onData: (bytes: Uint8Array, stream?: OutputStream) => void;
  /** The PTY's size (INITIAL_TERMINAL_SIZE when absent): a restart keeps the size its terminal log is at. */
  size?: TerminalSize | undefined;
}

/**
 * Finds the executable the way execvp would. node-pty forks before exec, so a
 * missing command only shows up as exit code 1 with an error printed in the
 * terminal; resolving first turns it into a clean `failed` fact.
 */
export function resolveExecutable(command: string, cwd: string, path: string): string | undefined {
  const candidates = command.includes("/")
    ? [isAbsolute(command) ? command : resolve(cwd, command)]
    : path.split(delimiter).filter(Boolean).map((dir) => join(dir, command));
  return candidates.find(isExecutableFile);
}

function isExecutableFile(file: string): boolean {
  try {
    accessSync(file, fsConstants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

/** Starts an app in a PTY (or piped when `tty: false`); throws SpawnError with a short, fact-safe reason. */
export function spawnApp(opts: SpawnAppOptions): AppProcess {
  const [command, ...args] = opts.app.cmd;
  if (!command) throw new SpawnError(`app ${opts.app.name}: empty command`);
  const file = resolveExecutable(command, opts.cwd, opts.env.PATH ?? "");
  if (!file) throw new SpawnError(`app ${opts.app.name}: command not found: ${command.slice(0, 128)}`);
  if (opts.app.tty === false) return spawnPiped({ name: opts.app.name, file, args, cwd: opts.cwd, env: opts.env, onData: opts.onData });
  let pty: IPty;
  try {
    pty = spawnPty(file, args, {
      name: "xterm-256color",
      cols: (opts.size ?? INITIAL_TERMINAL_SIZE).cols,
      rows: (opts.size ?? INITIAL_TERMINAL_SIZE).rows,
      cwd: opts.cwd,
      env: opts.env,
      // Raw bytes: the terminal log is bytes, and decoding here would split UTF-8 sequences.
      encoding: null,
    });
  } catch (err) {
    throw new SpawnError(`app ${opts.app.name}: could not start ${command.slice(0, 128)}`, { cause: err });
  }
  return wrapPty(opts.app.name, pty, opts.onData);
}

function wrapPty(name: string, pty: IPty, onData: (bytes: Uint8Array) => void): AppProcess {
  let alive = true;
  const exited = new Promise<AppExit>((resolveExit) => {
    pty.onExit(({ exitCode, signal }) => {
      alive = false;
      resolveExit(signal ? { exitCode: null, signal: signalName(signal) } : { exitCode, signal: undefined });
    });
  });
  // With encoding null node-pty delivers Buffers, although its types say string.
  pty.onData((chunk: string | Buffer) => onData(typeof chunk === "string" ? Buffer.from(chunk) : chunk));
  const input = new InputQueue(ptyInputSink(pty));
  void exited.then(() => input.close());
  const signal = (sig: NodeJS.Signals) => {
    if (!alive) return;
    // The PTY child leads its own process group; signal the group so its children go too.
    if (signalGroup(pty.pid, sig)) return;
    try {
      pty.kill(sig);
    } catch {
      // already gone
    }
  };
  return {
    name,
    pid: pty.pid,
    exited,
    input,
    resize: (cols, rows) => {
      if (alive) pty.resize(cols, rows);
    },
    setPaused: (paused) => (paused ? pty.pause() : pty.resume()),
    freeze: () => signal("SIGSTOP"),
    thaw: () => signal("SIGCONT"),
    terminate: (graceMs) => terminateGroup(signal, exited, graceMs),
  };
}

/** What node-pty 1.1.0's UnixTerminal holds (not in its types): the master fd and the stream reading it. */
interface PtyInternals {
  fd: unknown;
  _socket: { destroyed: boolean } | undefined;
}

/**
 * Writes to the PTY master without blocking. node-pty's own write goes
 * through a libuv TTY stream, which for a PTY master (it cannot reopen it)
 * retries EAGAIN in a busy loop: a program that does not read its stdin held
 * the whole runner. The master is already O_NONBLOCK, so a direct write takes
 * what the line discipline has room for and answers EAGAIN otherwise.
 */
export function ptyInputSink(pty: IPty): InputSink {
  const internals = pty as unknown as PtyInternals;
  const fd = internals.fd;
  if (typeof fd !== "number" || internals._socket === undefined) throw new Error("node-pty: no master fd to write input to");
  return {
    tryWrite: (bytes) => {
      // Destroying the socket closes the fd at once, and the number may be reused: never write after that.
      if (internals._socket?.destroyed !== false) return "closed";
      try {
        return writeSync(fd, bytes);
      } catch (err) {
        return (err as NodeJS.ErrnoException).code === "EAGAIN" ? 0 : "closed";
      }
    },
  };
}
