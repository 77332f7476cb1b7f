/**
 * An app on a PTY, whatever started it (the process backend's node-pty spawn,
 * or a sandbox's launch chain on one): its output, non-blocking input,
 * resize, pause and signals, and the end-of-life ordering of
 * patches/@lydell__node-pty (every byte before `exited`).
 */
import { writeSync } from "node:fs";
import type { IPty } from "@lydell/node-pty";
import { InputQueue, type InputSink } from "./input-queue.ts";
import { signalGroup, signalName, terminateGroup, type AppExit, type AppProcess } from "./process-group.ts";

/**
 * An app on a PTY as an AppProcess. `signalApp` says how a signal reaches
 * its processes: the PTY child's process group by default (it leads one);
 * a sandbox whose processes make groups of their own passes its own.
 */
export function wrapPty(name: string, pty: IPty, onData: (bytes: Uint8Array) => void, signalApp?: (pid: number, sig: NodeJS.Signals) => boolean): AppProcess {
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
    if ((signalApp ?? signalGroup)(pty.pid, sig)) return;
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
    signal,
    // A terminal has no end of input short of closing it; an exec'd process (the only caller) is piped.
    endInput: () => undefined,
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
