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

