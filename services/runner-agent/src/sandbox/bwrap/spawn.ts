/**
 * Starts a sandbox launch (launch.ts) with pipes or on a PTY, and signals a
 * session's processes.
 *
 * Under a PTY, node-pty forks, makes the slave the controlling terminal and
 * execs the chain's first link, so `nsenter … bwrap … -- cmd` runs on the
 * session's terminal and, without `--new-session`, keeps it as controlling
 * terminal inside the sandbox (job control works). With pipes the chain leads
 * a process group of its own (detached), like the process backend's apps.
 *
 * Signals go to every process of the session's uid (signalSession), not to a
 * process group: inside the sandbox a shell makes process groups of its own,
 * and bwrap's outer process does not relay signals. SIGKILL to the pid
 * namespace's init (one of those processes) makes the kernel kill the rest.
 * Freezing this way (SIGSTOP to each) can miss a process forked while the
 * list is walked; where cgroups are delegated, cgroup.freeze is exact.
 */
import { spawn } from "node:child_process";
import { constants as osConstants } from "node:os";
import { spawn as spawnPty, type IPty } from "@lydell/node-pty";
import { openEnvFile } from "./launch-env.ts";
import { sandboxLaunch, type BwrapTools, type SandboxSpec } from "./launch.ts";
import { pidsOfUid } from "./uid-allocator.ts";

export interface SandboxExit {
  /** null when the chain's first process was killed by a signal. */
  exitCode: number | null;
  signal: string | undefined;
}

export interface SandboxProcess {
  /** The host pid of the chain's first process (bwrap's outer process once exec'd). */
  readonly pid: number;
  readonly exited: Promise<SandboxExit>;
  /** Writes to the sandbox's stdin (the PTY's input under a terminal). */
  write(data: string): void;
  /** PTY only. */
  resize(cols: number, rows: number): void;
  /**
   * Sends sig to every process of the session's uid but bwrap's outer one
   * (which would die of most signals and take the sandbox down at once with
   * SIGKILL, before its processes saw the signal); answers how many got it.
   * The outer process exits after the sandbox's last process: `exited`
   * resolving means nothing of the session is left.
   */
  signal(sig: NodeJS.Signals): number;
}

export interface SpawnSandboxOptions {
  tools: BwrapTools;
  onData: (bytes: Uint8Array, stream: "pty" | "stdout" | "stderr") => void;
  /** PTY size; used when spec.tty. */
  size?: { cols: number; rows: number };
}

export class SandboxSpawnError extends Error {
  readonly code = "sandbox_spawn_failed";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SandboxSpawnError";
  }
}

const signalNames = new Map<number, string>(Object.entries(osConstants.signals).map(([name, num]) => [num, name]));

export function spawnInSandbox(spec: SandboxSpec, opts: SpawnSandboxOptions): SandboxProcess {
  const envFile = openEnvFile(spec.env);
  try {
    const proc = spawnWith(spec, opts, envFile.path);
    void proc.exited.finally(() => envFile.close());
    return proc;
  } catch (err) {
    envFile.close();
    throw err;
  }
}

function spawnWith(spec: SandboxSpec, opts: SpawnSandboxOptions, envFrom: string): SandboxProcess {
  const launch = sandboxLaunch(spec, opts.tools, envFrom);
  let outerPid = 0;
  const signal = (sig: NodeJS.Signals) => signalSession(spec.uid, sig, outerPid);
  if (spec.tty) {
    let pty: IPty;
    try {
      pty = spawnPty(launch.file, launch.args, { name: "xterm-256color", cols: opts.size?.cols ?? 80, rows: opts.size?.rows ?? 24, cwd: "/", env: launch.env, encoding: null });
    } catch (err) {
      throw new SandboxSpawnError(`session ${spec.sessionId}: could not start its sandbox`, { cause: err });
    }
    outerPid = pty.pid;
    const exited = new Promise<SandboxExit>((resolve) => {
      pty.onExit(({ exitCode, signal: sig }) => resolve(sig ? { exitCode: null, signal: signalNames.get(sig) ?? `SIG${sig}` } : { exitCode, signal: undefined }));
    });
    // With encoding null node-pty delivers Buffers, although its types say string.
    pty.onData((chunk: string | Buffer) => opts.onData(typeof chunk === "string" ? Buffer.from(chunk) : chunk, "pty"));
    return { pid: pty.pid, exited, write: (data) => pty.write(data), resize: (c, r) => pty.resize(c, r), signal };
  }
  const child = spawn(launch.file, launch.args, { cwd: "/", env: launch.env, stdio: ["pipe", "pipe", "pipe"], detached: true });
  if (child.pid === undefined) {
    child.once("error", () => undefined);
    throw new SandboxSpawnError(`session ${spec.sessionId}: could not start its sandbox`);
  }
  outerPid = child.pid;
  const exited = new Promise<SandboxExit>((resolve) => {
    // "close" waits for both pipes to drain, so no output arrives after the exit is reported.
    child.once("close", (code, sig) => resolve(sig ? { exitCode: null, signal: sig } : { exitCode: code, signal: undefined }));
  });
  child.stdout.on("data", (chunk: Buffer) => opts.onData(chunk, "stdout"));
  child.stderr.on("data", (chunk: Buffer) => opts.onData(chunk, "stderr"));
  child.stdin.on("error", () => undefined);
  return { pid: child.pid, exited, write: (data) => void child.stdin.write(data), resize: () => undefined, signal };
}

/**
 * Sends sig to every process whose real uid is the session's. No one else
 * runs as that uid (uid-allocator.ts), so this is exactly the session, bwrap's
 * outer process and the pid namespace's init included.
 */
export function signalSession(uid: number, sig: NodeJS.Signals, exceptPid = 0): number {
  let sent = 0;
  for (const pid of pidsOfUid(uid)) {
    if (pid === exceptPid) continue;
    try {
      process.kill(pid, sig);
      sent++;
    } catch {
      // exited meanwhile
    }
  }
  return sent;
}
