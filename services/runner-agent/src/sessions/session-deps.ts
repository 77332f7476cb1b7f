import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { DispatchCommand } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { CheckpointStore } from "../workspace/checkpoint.ts";
import type { TerminalSettings } from "../terminal/term-options.ts";
import type { OpenScreen } from "../terminal/screen-host.ts";
import type { FactPublisher } from "../fleet/facts.ts";
import type { RunnerMetrics } from "../metrics.ts";
import type { InputAdmission } from "../terminal/input.ts";
import type { SecretResolver } from "./secrets.ts";
import type { SandboxBackend } from "../sandbox/backend.ts";
import { CommandRefusedError } from "../errors.ts";

export type StartCommand = Extract<DispatchCommand, { type: "start" }>;

export interface WatchSettings {
  debounceMs: number;
  maxReloads: number;
  windowMs: number;
  /** How long after an app generation starts its own workspace writes do not reload it again (watch-reload.ts). */
  settleMs: number;
}

export interface SessionRuntimeDeps {
  /** This runner: subjects of its terminal logs and input carry its pool and id. */
  runner: { poolId: string; runnerId: string };
  /** Whether input may reach apps now: held while the runner's registration is unconfirmed (it may have been stopped past its lease). */
  inputAdmission: InputAdmission;
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  log: Logger;
  metrics: RunnerMetrics;
  facts: FactPublisher;
  checkpoints: CheckpointStore;
  /** What sessions run in (the composition root picks the backend). */
  sandbox: SandboxBackend;
  secrets: SecretResolver;
  now: () => number;
  childPath: string;
  killGraceMs: number;
  /** Handed to apps as PADDOCK_URL with a session token. */
  gatewayUrl: string | undefined;
  watch: WatchSettings;
  /** Marks sessions with terminal output for the runner's activity report (the schedulers' idle policy). */
  activity?: { touch(sessionId: string): void };
  /** How often a session's CPU and memory are sampled for its usage. */
  usageSampleMs?: number;
  /** Exec'd processes: an attached one whose reader stays silent this long has lost it and is killed. */
  exec?: { readerTimeoutMs: number } | undefined;
  /** Terminal log coalescing and screen checkpoints (defaultTerminalSettings when absent). */
  terminal?: TerminalSettings;
  /** Where screen emulators live (the runner's screen worker); this thread when absent. */
  openScreen?: OpenScreen;
}

/** booting → running ⇄ frozen; running → exited (run mode); any → ending (destroy, cold suspend, shutdown). */
export type Phase = "booting" | "running" | "frozen" | "exited" | "ending";

const refusals: Record<Phase, string> = {
  booting: "session is starting",
  running: "session is running",
  frozen: "session is suspended",
  exited: "session has exited",
  ending: "session is ending",
};

/** Refuses a command the session's phase does not allow (CommandRefusedError saying what the session is doing). */
export function requirePhase(phase: Phase, ...allowed: Phase[]): void {
  if (!allowed.includes(phase)) throw new CommandRefusedError(refusals[phase]);
}
