import { accessSync, constants as fsConstants, statSync } from "node:fs";
import { constants as osConstants } from "node:os";
import { delimiter, isAbsolute, join, resolve } from "node:path";
import { spawn as spawnPty, type IPty } from "@lydell/node-pty";
import type { AppSpec } from "@paddock/contracts";
import { SpawnError } from "./errors.ts";

export interface AppExit {
  /** null when the process was killed by a signal. */
  exitCode: number | null;
  signal: string | undefined;
}

/** One app of a session: a child process in its own PTY. */
export interface AppProcess {
  readonly name: string;
  readonly exited: Promise<AppExit>;
  write(bytes: Uint8Array): void;
  resize(cols: number, rows: number): void;
  /** Pauses or resumes reading the PTY (terminal log backpressure). */
  setPaused(paused: boolean): void;
  /** SIGTERM, then SIGKILL after graceMs if still alive; resolves on exit. */
  terminate(graceMs: number): Promise<AppExit>;
}

export interface SpawnAppOptions {
  app: AppSpec;
  cwd: string;
  env: Record<string, string>;
  onData: (bytes: Uint8Array) => void;
}

export const DEFAULT_COLS = 80;
export const DEFAULT_ROWS = 24;

const signalNames = new Map<number, string>(Object.entries(osConstants.signals).map(([name, num]) => [num, name]));

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

/** Starts an app in a PTY; throws SpawnError with a short, fact-safe reason. */
export function spawnApp(opts: SpawnAppOptions): AppProcess {
  const [command, ...args] = opts.app.cmd;
  if (!command) throw new SpawnError(`app ${opts.app.name}: empty command`);
  const file = resolveExecutable(command, opts.cwd, opts.env.PATH ?? "");
  if (!file) throw new SpawnError(`app ${opts.app.name}: command not found: ${command.slice(0, 128)}`);
  let pty: IPty;
  try {
    pty = spawnPty(file, args, {
      name: "xterm-256color",
      cols: DEFAULT_COLS,
      rows: DEFAULT_ROWS,
      cwd: opts.cwd,
      env: opts.env,
      // Raw bytes: the terminal log is bytes, and decoding here would split UTF-8 sequences.
      encoding: null,
    });
  } catch {
    throw new SpawnError(`app ${opts.app.name}: could not start ${command.slice(0, 128)}`);
  }
  return wrapPty(opts.app.name, pty, opts.onData);
}

function wrapPty(name: string, pty: IPty, onData: (bytes: Uint8Array) => void): AppProcess {
  let alive = true;
  const exited = new Promise<AppExit>((resolveExit) => {
    pty.onExit(({ exitCode, signal }) => {
      alive = false;
      resolveExit(signal ? { exitCode: null, signal: signalNames.get(signal) ?? `SIG${signal}` } : { exitCode, signal: undefined });
    });
  });
  // With encoding null node-pty delivers Buffers, although its types say string.
  pty.onData((chunk: string | Buffer) => onData(typeof chunk === "string" ? Buffer.from(chunk) : chunk));
  const write = pty.write.bind(pty) as unknown as (data: string | Buffer) => void;
  const signalGroup = (sig: NodeJS.Signals) => {
    if (!alive) return;
    try {
      // The PTY child leads its own process group; signal the group so its children go too.
      process.kill(-pty.pid, sig);
    } catch {
      try {
        pty.kill(sig);
      } catch {
        // already gone
      }
    }
  };
  return {
    name,
    exited,
    write: (bytes) => {
      if (alive) write(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    },
    resize: (cols, rows) => {
      if (alive) pty.resize(cols, rows);
    },
    setPaused: (paused) => (paused ? pty.pause() : pty.resume()),
    terminate: async (graceMs) => {
      signalGroup("SIGTERM");
      const timer = setTimeout(() => signalGroup("SIGKILL"), graceMs);
      try {
        return await exited;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
