/**
 * How a warm sandbox's waiting shell (warm-pool.ts) becomes an app: the
 * script the runner writes into its FIFO, and the write itself. The script
 * clears what the waiter's environment held, exports exactly the app's
 * environment (each value single-quoted: the shell expands nothing in it),
 * changes to the app's cwd and execs its command, so the app runs as the
 * same process a cold start would exec (launch.ts), with the same
 * environment it would have had there (`coldStartEnv`).
 *
 * Secrets and tokens are in the script, so it goes through the FIFO only:
 * never into an argv (world-readable in /proc/<pid>/cmdline), a file or a
 * path name.
 */
import { closeSync, constants as fsConstants, fstatSync, openSync, writeSync } from "node:fs";
import { Socket } from "node:net";

/** How both paths spawn an app's PTY (backend.ts's cold start and the pool's waiters). */
export const PTY_SPAWN = { name: "xterm-256color", cwd: "/" } as const;

/**
 * The environment a cold start's app on a terminal gets: the app's, with
 * TERM the PTY's name (as node-pty would set it) and PWD the sandbox's cwd
 * (bwrap's `--chdir`); launch.ts gives it nothing else. A warm start's app is
 * given exactly this.
 */
export function coldStartEnv(env: Record<string, string>, cwd: string): Record<string, string> {
  return { ...env, TERM: PTY_SPAWN.name, PWD: cwd };
}

/** What a waiter's environment holds before its script runs: bwrap's PWD in the pool's empty env, and the shell's OLDPWD after a cd. */
export const WAITER_ENV: Record<string, string> = {};
const WAITER_NAMES = ["PWD", "OLDPWD"];

/** A name a POSIX shell can export. */
const SHELL_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/**
 * Names a shell refuses to take from an assignment (dash: OPTIND must be a
 * number, else the shell exits; bash as sh: its read-only variables). An app
 * whose environment holds one starts cold, where bwrap passes it untouched.
 */
const SHELL_SPECIAL = new Set(["OPTIND", "BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID"]);

export interface WarmApp {
  command: readonly string[];
  /** The app's complete environment, as a cold start's app gets it (coldStartEnv). */
  env: Record<string, string>;
  cwd: string;
}

/** Why an app cannot be handed to a waiter (it starts cold then); undefined when it can. */
export function unsafeForWarm(app: WarmApp): string | undefined {
  const [command] = app.command;
  if (command === undefined) return "empty command";
  // `exec -x` is an option to some shells, a command to others.
  if (command.startsWith("-")) return "command starts with -";
  for (const [name, value] of Object.entries(app.env)) {
    if (!SHELL_NAME.test(name) || SHELL_SPECIAL.has(name)) return "environment name a shell cannot export";
    if (value.includes("\0")) return "NUL in the environment";
  }
  if (app.command.some((a) => a.includes("\0")) || app.cwd.includes("\0")) return "NUL in the command";
  return undefined;
}

/** A word the shell takes literally: single quotes, each ' as '\''. */
function quote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * The descriptor a waiter holds its FIFO open on, read and write (warm-pool.ts):
 * open from before it says it waits until its script closes it, so the FIFO
 * has a reader (the runner's open succeeds) exactly while the waiter lives,
 * and what the runner writes waits in the pipe whenever the shell reads it.
 */
export const WAITER_FD = 3;

/** The script that turns a waiter into app (check unsafeForWarm first). */
export function warmScript(app: WarmApp): string {
  const lines = [`exec ${WAITER_FD}<&-`, `cd ${quote(app.cwd)} || exit 126`, `unset ${WAITER_NAMES.join(" ")}`];
  for (const [name, value] of Object.entries(app.env)) lines.push(`export ${name}=${quote(value)}`);
  lines.push(`exec ${app.command.map(quote).join(" ")}`);
  return `${lines.join("\n")}\n`;
}

/**
 * Opens the FIFO a waiter reads, for writing, without blocking: undefined
 * when no process has it open for reading (ENXIO: the waiter is gone, or not
 * there yet), or when the path is not a FIFO.
 */
export function openWaiterFifo(path: string): number | undefined {
  let fd: number;
  try {
    fd = openSync(path, fsConstants.O_WRONLY | fsConstants.O_NONBLOCK | fsConstants.O_NOFOLLOW);
  } catch {
    return undefined;
  }
  if (!fstatSync(fd).isFIFO()) {
    closeSync(fd);
    return undefined;
  }
  return fd;
}

/**
 * Writes the script and closes fd: false when the reader is gone (EPIPE),
 * fd closed then too. What an empty pipe holds (64 KiB) is written at once;
 * the rest of a larger script (a large environment) follows as the shell
 * reads, through a stream that closes fd when it is done.
 */
export function writeScript(fd: number, script: string, onLate: (err: Error) => void): boolean {
  const bytes = Buffer.from(script);
  let written = 0;
  try {
    written = writeSync(fd, bytes);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EAGAIN") {
      closeSync(fd);
      return false;
    }
  }
  if (written === bytes.length) {
    closeSync(fd);
    return true;
  }
  const rest = new Socket({ fd, readable: false, writable: true });
  rest.once("error", onLate);
  rest.end(bytes.subarray(written));
  return true;
}
