import type { AttachMode } from "@paddock/contracts";
import type { TerminalAttachment } from "./attach.ts";
import type { CliIo } from "./io.ts";

/** Ctrl-] : leaves the session running. */
export const DETACH_KEY = 0x1d;
const CTRL_C = 0x03;

export interface InputBinding {
  /** Whether stdin was put into raw mode (messages then need \r\n). */
  readonly raw: boolean;
  /** Restores the terminal and stops reading stdin. Idempotent. */
  release(): void;
}

/**
 * Connects the CLI's stdin to an attachment. On a TTY: raw mode, the detach
 * key (a viewer also detaches on Ctrl-C, since its input goes nowhere), and
 * the window size on start and on SIGWINCH. Otherwise a controller forwards
 * stdin bytes as they come, and EOF changes nothing; a viewer ignores stdin.
 */
export function bindInput(io: CliIo, att: TerminalAttachment, mode: AttachMode): InputBinding {
  const { stdin, stdout } = io;
  const tty = stdin.isTTY === true && typeof stdin.setRawMode === "function";
  const controller = mode === "controller";
  const cleanups: Array<() => void> = [];

  if (tty) {
    stdin.setRawMode?.(true);
    cleanups.push(() => stdin.setRawMode?.(false));
    if (controller && stdout.isTTY) {
      const sendSize = () => {
        if (stdout.columns && stdout.rows) att.resize(stdout.columns, stdout.rows);
      };
      sendSize();
      if (io.signals) {
        const signals = io.signals;
        signals.on("SIGWINCH", sendSize);
        cleanups.push(() => signals.off("SIGWINCH", sendSize));
      }
    }
  }

  let released = false;
  /** Backpressure: stdin is not read while the attachment holds too much unsent input. */
  const send = (bytes: Uint8Array) => {
    if (att.sendInput(bytes)) return;
    stdin.pause();
    void att.whenWritable().then(() => {
      if (!released) stdin.resume();
    });
  };

  if (tty || controller) {
    const onData = (chunk: Buffer | string) => {
      const bytes = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
      if (tty) {
        const at = bytes.findIndex((b) => b === DETACH_KEY || (!controller && b === CTRL_C));
        if (at !== -1) {
          if (controller) send(bytes.subarray(0, at));
          att.detach();
          return;
        }
      }
      if (controller) send(bytes);
    };
    stdin.on("data", onData);
    stdin.resume();
    cleanups.push(() => {
      stdin.off("data", onData);
      stdin.pause();
    });
  }

  return {
    raw: tty,
    release() {
      if (released) return;
      released = true;
      for (const fn of cleanups.reverse()) fn();
    },
  };
}
