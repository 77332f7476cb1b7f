import { constants as osConstants } from "node:os";
import type { InputQueue } from "./input-queue.ts";

/** Which stream an output chunk of an app without a PTY came from (a PTY has one). */
export const OutputStream = { stdout: "stdout", stderr: "stderr" } as const;
export type OutputStream = (typeof OutputStream)[keyof typeof OutputStream];

export interface AppExit {
  /** null when the process was killed by a signal. */
  exitCode: number | null;
  signal: string | undefined;
}

/** One app of a session: a child process in its own PTY (or with pipes when `tty: false`). */
export interface AppProcess {
  readonly name: string;
  /** The child's pid; it leads its own process group. */
  readonly pid: number;
  readonly exited: Promise<AppExit>;
  /** The app's stdin, written without blocking; closed when the process exits. */
  readonly input: InputQueue;
  resize(cols: number, rows: number): void;
  /** Pauses or resumes reading the PTY (terminal log backpressure). */
  setPaused(paused: boolean): void;
  /** Closes stdin (a pipe's end: the program reads EOF) once what is queued was written; nothing on a PTY. */
  endInput(): void;
  /** Sends sig to the whole process group (its tree, through a sandbox); nothing once it exited. */
  signal(sig: NodeJS.Signals): void;
  /** SIGSTOP / SIGCONT to the whole process group (warm suspend). */
  freeze(): void;
  thaw(): void;
  /** SIGTERM (and SIGCONT, so a frozen group sees it), then SIGKILL after graceMs; resolves on exit. */
  terminate(graceMs: number): Promise<AppExit>;
}

const signalNames = new Map<number, string>(Object.entries(osConstants.signals).map(([name, num]) => [num, name]));

export function signalName(signal: number): string {
  return signalNames.get(signal) ?? `SIG${signal}`;
}

/** Sends sig to the process group led by pid; false when it is gone. */
export function signalGroup(pid: number, sig: NodeJS.Signals): boolean {
  try {
    process.kill(-pid, sig);
    return true;
  } catch {
    return false;
  }
}

/** SIGTERM (plus SIGCONT for a frozen group), SIGKILL after graceMs; resolves on exit. */
export async function terminateGroup(signal: (sig: NodeJS.Signals) => void, exited: Promise<AppExit>, graceMs: number): Promise<AppExit> {
  signal("SIGTERM");
  signal("SIGCONT");
  const timer = setTimeout(() => signal("SIGKILL"), graceMs);
  try {
    return await exited;
  } finally {
    clearTimeout(timer);
  }
}


/**
 * An app's exit as seen through a sandbox whose outer process reports its
 * child's death by signal n as exit status 128+n (bwrap's monitor does, as a
 * shell's `$?` does): read back as the signal, so a killed app is reported
 * killed on every backend. An app that itself exits with 128+n reads as
 * killed by n, the same ambiguity a shell has.
 */
export function exitThroughSandbox(exit: AppExit): AppExit {
  const code = exit.exitCode;
  if (code === null || code <= 128 || !signalNames.has(code - 128)) return exit;
  return { exitCode: null, signal: signalName(code - 128) };
}

/** The same app with its exits read through exitThroughSandbox. */
export function withSandboxExits(app: AppProcess): AppProcess {
  return {
    name: app.name,
    pid: app.pid,
    exited: app.exited.then(exitThroughSandbox),
    input: app.input,
    resize: (cols, rows) => app.resize(cols, rows),
    setPaused: (paused) => app.setPaused(paused),
    signal: (sig) => app.signal(sig),
    endInput: () => app.endInput(),
    freeze: () => app.freeze(),
    thaw: () => app.thaw(),
    terminate: async (graceMs) => exitThroughSandbox(await app.terminate(graceMs)),
  };
}
