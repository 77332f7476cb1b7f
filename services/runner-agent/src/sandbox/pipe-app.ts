import { spawn } from "node:child_process";
import { SpawnError } from "../errors.ts";
import { InputQueue } from "./input-queue.ts";
import { OutputStream, signalGroup, signalName, terminateGroup, type AppExit, type AppProcess } from "./process-group.ts";

export interface SpawnPipedOptions {
  name: string;
  /** An executable already resolved on PATH. */
  file: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
  onData: (bytes: Uint8Array, stream: OutputStream) => void;
  /** How a signal reaches the app's processes (its process group when absent); see the bwrap backend. */
  signal?: (pid: number, sig: NodeJS.Signals) => void;
}

/**
 * An app without a PTY (`tty: false`): stdin, stdout and stderr are pipes and
 * every output chunk says which stream it came from. It leads its own
 * process group, like a PTY child, so signals reach its children too.
 */
export function spawnPiped(opts: SpawnPipedOptions): AppProcess {
  const child = spawn(opts.file, opts.args, { cwd: opts.cwd, env: opts.env, stdio: ["pipe", "pipe", "pipe"], detached: true });
  const pid = child.pid;
  if (pid === undefined) {
    // spawn reports ENOENT/EACCES asynchronously; the error handler keeps it from crashing the agent.
    child.once("error", () => undefined);
    throw new SpawnError(`app ${opts.name}: could not start ${opts.file.slice(0, 128)}`);
  }
  let alive = true;
  const exited = new Promise<AppExit>((resolve) => {
    // "close" waits for both pipes to drain, so no output arrives after the exit is reported.
    child.once("close", (code, sig) => {
      alive = false;
      resolve(sig ? { exitCode: null, signal: sig } : { exitCode: code, signal: undefined });
    });
    child.once("error", () => {
      alive = false;
      resolve({ exitCode: null, signal: signalName(9) });
    });
  });
  child.stdout.on("data", (chunk: Buffer) => opts.onData(chunk, OutputStream.stdout));
  child.stderr.on("data", (chunk: Buffer) => opts.onData(chunk, OutputStream.stderr));
  // A child that closed stdin must not crash the agent on the next keystroke.
  child.stdin.on("error", () => undefined);
  const signalApp = opts.signal ?? ((p: number, sig: NodeJS.Signals) => void signalGroup(p, sig));
  const signal = (sig: NodeJS.Signals) => {
    if (alive) signalApp(pid, sig);
  };
  // The pipe buffers in node past its high-water mark: hand it more only after it drained.
  const stdin = child.stdin;
  const input = new InputQueue({
    tryWrite: (bytes) => {
      if (!alive || !stdin.writable) return "closed";
      if (stdin.writableNeedDrain) return 0;
      stdin.write(bytes);
      return bytes.byteLength;
    },
  });
  void exited.then(() => input.close());
  return {
    name: opts.name,
    pid,
    exited,
    input,
    resize: () => undefined,
    setPaused: (paused) => {
      for (const s of [child.stdout, child.stderr]) {
        if (paused) s.pause();
        else s.resume();
      }
    },
    signal,
    endInput: () =>
      input.whenBelow(0, () => {
        input.close();
        if (stdin.writable) stdin.end();
      }),
    freeze: () => signal("SIGSTOP"),
    thaw: () => signal("SIGCONT"),
    terminate: (graceMs) => terminateGroup(signal, exited, graceMs),
  };
}
