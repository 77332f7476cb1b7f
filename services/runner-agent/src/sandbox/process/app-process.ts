import { spawn as spawnPty, type IPty } from "@lydell/node-pty";
import { INITIAL_TERMINAL_SIZE, type AppSpec, type TerminalSize } from "@paddock/contracts";
import { SpawnError } from "../../errors.ts";
import { resolveExecutable } from "../executable.ts";
import { spawnPiped } from "../pipe-app.ts";
import type { AppProcess, OutputStream } from "../process-group.ts";
import { wrapPty } from "../pty-app.ts";

export type { AppExit, AppProcess } from "../process-group.ts";
export { ptyInputSink } from "../pty-app.ts";

export interface SpawnAppOptions {
  app: AppSpec;
  cwd: string;
  env: Record<string, string>;
  /** stream is set for piped apps only. */
  onData: (bytes: Uint8Array, stream?: OutputStream) => void;
  /** The PTY's size (INITIAL_TERMINAL_SIZE when absent): a restart keeps the size its terminal log is at. */
  size?: TerminalSize | undefined;
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
