import type { Duplex } from "node:stream";
/**
 * The sandbox backend seam: what a session's lifecycle (`sessions/`) asks of
 * whatever its processes run in. `sessions/` talks to these interfaces only;
 * the composition root (`agent.ts`) picks the backend (`process/` or
 * `bwrap/`) once at start. Nothing here knows a backend.
 */
import type { AppSpec, TerminalSize } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { AppProcess, OutputStream } from "./process-group.ts";
import type { UsageScope } from "./usage.ts";

/** Which backend a runner's sessions run in: reported as the capability `sandbox:<kind>`. */
export const SandboxKind = { process: "process", bwrap: "bwrap" } as const;
export type SandboxKind = (typeof SandboxKind)[keyof typeof SandboxKind];

/** The capability a runner reports for its backend; environments may require it (`requirements.capabilities`). */
export function sandboxCapability(kind: SandboxKind): string {
  return `sandbox:${kind}`;
}

export type ScriptOutcome =
  | { kind: "ok" }
  | { kind: "exit"; exitCode: number | null; signal: string | undefined }
  | { kind: "timeout" }
  | { kind: "aborted" }
  | { kind: "spawn_error" };

export interface SandboxScript {
  script: string;
  env: Record<string, string>;
  timeoutMs: number;
  signal?: AbortSignal;
}

/** A command run to its end in the sandbox (an argv, no shell), like a script: no PTY, stdin closed, stdout discarded. */
export interface SandboxCommand {
  argv: readonly string[];
  env: Record<string, string>;
  timeoutMs: number;
  signal?: AbortSignal;
}

/** How a command ended; `not_found`: its executable is not in the session's root (image or host) on its PATH. */
export type CommandOutcome = ScriptOutcome | { kind: "not_found" };

/** The most of a command's stderr kept (its last bytes): enough for an error's tail, bounded whatever it prints. */
export const COMMAND_STDERR_TAIL_BYTES = 4096;

export interface CommandResult {
  outcome: CommandOutcome;
  /** The last COMMAND_STDERR_TAIL_BYTES of its stderr, as UTF-8 (never logged here: it may hold what the command was given). */
  stderrTail: string;
}

export interface SandboxApp {
  app: AppSpec;
  env: Record<string, string>;
  /** stream is set for piped apps only. */
  onData: (bytes: Uint8Array, stream?: OutputStream) => void;
  /** The PTY's size (INITIAL_TERMINAL_SIZE when absent): a restart keeps the size its terminal log is at. */
  size?: TerminalSize | undefined;
  /** The working directory relative to the workspace (checked to be one by the caller); the workspace when absent. */
  cwd?: string | undefined;
}

/** A host user (a bwrap session's own uid and gid). */
export interface SandboxUser {
  uid: number;
  gid: number;
}

/** One session placement's sandbox, from boot until destroy. */
export interface Sandbox {
  /**
   * The workspace as the runner sees it (host path): checkpoints are taken
   * from and restored into it, and workspace operations act on it.
   */
  readonly workspace: string;
  /** The workspace as the session's processes see it (their cwd and HOME). */
  readonly insideWorkspace: string;
  /** What the image the session is rooted in asks of its processes (env, default command); unset without an image. */
  readonly image?: ImageRunConfig;
  /**
   * The user the session's processes run as and its files belong to, where
   * that is not the runner's own (bwrap; unset for the process backend). The
   * runner's workspace operations act as this user or only through
   * descriptors: what they write is given to it as it is made, what they read
   * is only what it owns (workspace/).
   */
  readonly user?: SandboxUser;
  /**
   * After the runner wrote into the workspace (a restore, an environment
   * snapshot): hands what it wrote to the session. Where the session is a
   * user of its own (`user`), the writes already gave each inode to it as it
   * was made, so there is nothing left to do.
   */
  adopt(): Promise<void>;
  /**
   * Where the session reaches the runner: the host address its egress proxy
   * listens on, and the gateway URL it is handed as PADDOCK_URL (the runner's
   * own, or a relay the session can reach).
   */
  reach(gatewayUrl: string | undefined): Promise<SandboxReach>;
  /** Starts an app (PTY, or pipes when `tty: false`); throws SpawnError with a fact-safe reason. */
  startApp(opts: SandboxApp): AppProcess;
  /**
   * Starts an exec'd command (pipes, never a PTY) as the session's processes
   * run: on bwrap a fork of the session's exec init (exec-holder.ts) where
   * the runner has one, else a piped app. Throws SpawnError as startApp.
   */
  startExec(opts: SandboxApp): AppProcess;
  /**
   * A connection to a port on the session's own loopback (a preview,
   * docs/ports.md): made from inside its network namespace on bwrap (by its
   * exec init), on the host's loopback on the process backend.
   * PortUnreachableError when nothing listens there.
   */
  connectPort(port: number): Promise<Duplex>;
  /** Runs a setup or init script (`/bin/sh -c`), its output discarded. */
  runScript(opts: SandboxScript): Promise<ScriptOutcome>;
  /** Runs an argv to its end as the session's processes run (its user, root, network, egress), keeping its stderr's tail. */
  runCommand(opts: SandboxCommand): Promise<CommandResult>;
  /**
   * Warm suspend: stops every process of the session (apps' processes and
   * whatever left their process group), or lets them go on.
   */
  freeze(apps: readonly AppProcess[]): void;
  thaw(apps: readonly AppProcess[]): void;
  /** After the apps were stopped: kills what of the session is still running (daemons, setsid escapees). */
  killLeftovers(): Promise<void>;
  /** Whose CPU and memory are the session's usage, given its apps: their process groups, or the session's own uid. */
  usageScope(apps: readonly AppProcess[]): UsageScope;
  /** Kills what is left, removes the sandbox's directory and gives back what it held (uid, network). Idempotent. */
  destroy(): Promise<void>;
}

export interface SandboxReach {
  /** The address the session's egress proxy listens on. */
  egressHost: string;
  /** The port it listens on when free (0: any): one the session's network lets through already. */
  egressPort: number;
  /** PADDOCK_URL as the session can reach it; undefined when the runner has no gateway URL. */
  gatewayUrl: string | undefined;
  /** Hosts the session reaches directly rather than through its egress proxy (NO_PROXY): the gateway's relay. */
  noProxy: string[];
  /** Lets the session reach these ports of egressHost (its egress proxy's); no-op where nothing is filtered. */
  allow(ports: readonly number[]): Promise<void>;
}

export interface SandboxBackend {
  readonly kind: SandboxKind;
  /** The kinds of per-session limit it enforces (`rlimit`, `cgroup`), reported as the capabilities `limits:<kind>`; none on process. */
  readonly limits: readonly string[];
  /**
   * Runner start: readies the directory holding the sandboxes, killing what
   * a previous runner process left (processes, directories, uids, networks).
   */
  prepare(sessionsDir: string): Promise<void>;
  /**
   * A session's sandbox in `dir` (made here), rooted in `image` (an OCI
   * reference) when set: a backend that cannot root a session in an image
   * refuses it (SpawnError with a fact-safe reason), never runs it on the host's root.
   */
  create(opts: { sessionId: string; dir: string; image?: string | undefined }): Promise<Sandbox>;
  /** Removes the directory of a sandbox this runner no longer holds a record of (a destroy for an ended placement). */
  removeDir(dir: string): Promise<void>;
  /** Kills processes of sessions this runner does not hold (`held` answers for a session dir's name); answers how many. */
  reapStrays(sessionsDir: string, held: (name: string) => boolean): Promise<number>;
  /** Runner stop: releases what the backend holds runner-wide. */
  stop(): Promise<void>;
}

/**
 * What an image's config asks of the processes run in it, as Paddock honours
 * it (docs/sandbox.md, Images): its Env under Paddock's own variables, its
 * Entrypoint and Cmd as the main app's command when the session names none.
 * WorkingDir and User are not honoured (the cwd is the workspace, the user the
 * session's own uid), so they are not here.
 */
export interface ImageRunConfig {
  /** The image's Env, later entries winning; never a PADDOCK_ variable. */
  env: Readonly<Record<string, string>>;
  /** Entrypoint then Cmd; undefined when both are empty. */
  command?: readonly string[];
}

/** An image's unpacked root filesystem, held (never evicted) until released. */
export interface ImageRoot {
  rootfs: string;
  config: ImageRunConfig;
  release(): void;
}

/** Where a backend gets images' roots from (the runner's image store, adapted by the composition root). */
export interface SandboxImages {
  /** Pulls (or finds cached) and holds the image; throws SpawnError with a fact-safe reason. */
  acquire(reference: string): Promise<ImageRoot>;
}

export interface SandboxBackendDeps {
  log: Logger;
  /** PATH of session processes (and where the backend looks for its tools). */
  childPath: string;
}
