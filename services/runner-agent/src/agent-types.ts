/** The runner agent's config, dependencies and handle: what createRunnerAgent (agent.ts) takes and gives. */
import type { NatsConnection } from "@nats-io/transport-node";
import type { BusConnectOptions } from "@paddock/bus";
import type { HeldSession } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { RunnerConfig } from "./config.ts";
import type { ImagesConfig } from "./images/index.ts";
import type { RunnerMetrics } from "./metrics.ts";
import type { SandboxBackend } from "./sandbox/backend.ts";
import type { SandboxSettings } from "./sandbox-choice.ts";
import type { SecretResolver } from "./sessions/secrets.ts";
import type { SessionManager } from "./sessions/sessions.ts";
import type { TerminalSettings } from "./terminal/term-options.ts";
import type { CheckpointCompression, CheckpointFormat } from "./workspace/checkpoint.ts";
import type { WorkspaceLimits } from "./workspace/workspace-ops.ts";

export type AgentConfig = Pick<
  RunnerConfig,
  | "runnerId"
  | "poolId"
  | "capacityTotal"
  | "capabilities"
  | "dataDir"
  | "leaseRenewMs"
  | "leaseTtlMs"
  | "cpuMillis"
  | "memoryBytes"
  | "diskBytes"
  | "killGraceMs"
  | "registerTimeoutMs"
  | "gatewayUrl"
  | "watchDebounceMs"
  | "watchMaxReloads"
  | "watchWindowMs"
> & {
  /** PATH of session processes. */
  childPath: string;
  /** Bounds of workspace push and diff; defaults when absent. */
  workspace?: WorkspaceLimits;
  /** Terminal log coalescing and screen checkpoints; defaults when absent. */
  terminal?: TerminalSettings;
  /** How long an attached exec's reader may stay silent before the command is killed; EXEC_READER_TIMEOUT_MS when absent. */
  execReaderTimeoutMs?: number;
  /** How checkpoints are packed; gzip when absent. */
  checkpointCompression?: CheckpointCompression;
  checkpointFormat?: CheckpointFormat;
  /** Manifest restores of at least this many chunks go to the restore workers; RESTORE_WORKERS_MIN_CHUNKS when absent. */
  restoreWorkersMinChunks?: number;
  /** Stream replicas (`PADDOCK_REPLICAS`); 1 when absent (a single server). */
  replicas?: number;
  /** Held check interval (`PADDOCK_RUNNER_HELD_CHECK_MS`); 30 s when absent, 0 disables. */
  heldCheckMs?: number;
  /** Watch mode: an app generation's settle window (`PADDOCK_RUNNER_WATCH_SETTLE_MS`); 2 s when absent. */
  watchSettleMs?: number;
  /** The data plane's listener (`PADDOCK_RUNNER_DATA_LISTEN`, ports/data-plane.ts); previews' bytes stay on the bus when absent. */
  dataPlane?: { host: string; port: number; advertiseHost: string } | undefined;
  /** Activity report interval (`PADDOCK_RUNNER_ACTIVITY_MS`); 30 s when absent. */
  activityMs?: number;
  /** Which sandbox backend sessions run in (`PADDOCK_SANDBOX`, sandbox-choice.ts); process when absent. */
  sandbox?: SandboxSettings;
  /** The image store's settings (`PADDOCK_IMAGE_*`); defaults when absent. */
  images?: ImagesConfig;
};

export interface RunnerAgentDeps {
  nc: NatsConnection;
  config: AgentConfig;
  log: Logger;
  metrics: RunnerMetrics;
  now: () => number;
  newId: () => string;
  /** Delay used between retries; injectable so tests never wait on wall-clock backoff. */
  sleep?: (ms: number) => Promise<void>;
  /** Values for environments' secretRefs; resolves nothing by default. */
  secrets?: SecretResolver;
  /** The sandbox backend, built by the caller (tests); chosen from config.sandbox at start when absent. */
  sandbox?: SandboxBackend;
  /** Called after each accepted (re-)registration, once the sessions it listed in destroy are gone. */
  onRegistered?: (event: RegisteredEvent) => void;
  /**
   * How this runner connects to the bus (its own credentials): restores then
   * fetch and write checkpoint chunks on a worker thread with a connection of
   * its own (workspace/fill-worker-host.ts). Absent (agents made in a test
   * around a connection), on the agent's thread.
   */
  bus?: BusConnectOptions;
}

export interface RegisteredEvent {
  generation: number;
  /** Why this registration happened: "start", or what fenced the runner ("lost", "generation", "missing", "reconnect"). */
  reason: string;
  /** Sessions torn down because the reply listed them. */
  destroyed: HeldSession[];
}

export interface RunnerAgent {
  /** Registers, starts the lease and consumes dispatch; resolves once serving. */
  start(): Promise<{ generation: number }>;
  /** Stops consuming, kills sessions (their last output and facts go out), stops the lease. */
  stop(): Promise<void>;
  /** The generation granted at registration; 0 before. */
  readonly generation: number;
  isReady(): boolean;
  /** True from the moment the runner knows (or suspects) its generation is superseded until it re-registered. */
  readonly fenced: boolean;
  sessions: SessionManager;
  /** Hooks for tests: stop renewing the lease (as a crash would), renew and check the fence now, run a held check now. */
  readonly testing: { stopLease(): Promise<void>; renewNow(): Promise<void>; checkHeld(): Promise<HeldSession[]> };
}
