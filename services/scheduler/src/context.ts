import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { Counter, type Registry } from "prom-client";
import type { BootEnvironment, NewId, Now, Runner, RunnerFact, Session } from "@paddock/contracts";
import type { BusMetrics } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { FactBacklog } from "./state/fact-backlog.ts";
import type { SchedulerConfig } from "./config.ts";
import type { RunnerRecords, SessionRecords, Versioned } from "./state/store.ts";
import type { KvView } from "./state/view.ts";
import type { PresenceTracker } from "./state/presence.ts";
import type { LeaseTracker } from "./state/lease-tracker.ts";
import type { EnvironmentStore } from "./state/environment-store.ts";
import type { SessionWaiters } from "./state/waiters.ts";
import type { SealKeys } from "./state/seal-keys.ts";
import { createCheckpointGcMetrics, type CheckpointGcMetrics } from "./policies/checkpoint-gc.ts";
import type { SessionIndex } from "./state/session-index.ts";
import type { CoalescedReads } from "./state/coalesce.ts";

export interface SchedulerMetrics {
  /** Runner facts dropped because their generations do not match the record. */
  staleFacts: Counter<"type">;
  /** Runner facts that named a transition the state machine does not allow. */
  illegalFacts: Counter<"type">;
  /** Runner facts whose body names another runner than the subject they were published on. */
  foreignFacts: Counter<"type">;
  /** Registrations refused: a body naming another runner than its subject, or a reply inbox not the runner's own. */
  registrationsRefused: Counter<"reason">;
  placements: Counter;
  /** Secret requests refused: not the holder's inbox, no such placement, or a name the environment does not reference. */
  secretsRefused: Counter<"reason">;
  checkpointGc: CheckpointGcMetrics;
}

export function createSchedulerMetrics(registry: Registry): SchedulerMetrics {
  return {
    staleFacts: new Counter({
      name: "paddock_stale_facts_total",
      help: "Runner facts dropped by the generation fence",
      labelNames: ["type"],
      registers: [registry],
    }),
    illegalFacts: new Counter({
      name: "paddock_illegal_facts_total",
      help: "Runner facts naming a transition the state machine forbids",
      labelNames: ["type"],
      registers: [registry],
    }),
    foreignFacts: new Counter({
      name: "paddock_foreign_facts_total",
      help: "Runner facts dropped because their body names another runner than their subject",
      labelNames: ["type"],
      registers: [registry],
    }),
    registrationsRefused: new Counter({
      name: "paddock_registrations_refused_total",
      help: "Runner registrations refused without effect (subject/body mismatch, or a reply inbox not the runner's own)",
      labelNames: ["reason"],
      registers: [registry],
    }),
    placements: new Counter({ name: "paddock_placements_total", help: "Sessions placed on a runner", registers: [registry] }),
    secretsRefused: new Counter({
      name: "paddock_secrets_refused_total",
      help: "Runner requests for session secrets that were refused",
      labelNames: ["reason"],
      registers: [registry],
    }),
    checkpointGc: createCheckpointGcMetrics(registry),
  };
}

/** Everything the scheduler's handlers share; built once by createScheduler. */
export interface SchedulerContext {
  nc: NatsConnection;
  js: JetStreamClient;
  config: SchedulerConfig;
  log: Logger;
  bus: BusMetrics;
  metrics: SchedulerMetrics;
  now: Now;
  newId: NewId;
  sessions: SessionRecords;
  runners: RunnerRecords;
  sessionView: KvView<typeof Session>;
  /** Per-workspace counts and the queued set, maintained by sessionView. */
  sessionIndex: SessionIndex;
  runnerView: KvView<typeof Runner>;
  /** Exact reads of runner records for the fact fence, shared by facts that arrive together. */
  runnerReads: CoalescedReads<Versioned<Runner> | undefined>;
  /** How far the schedulers have got through the runners' facts (creating timeouts wait for them). */
  factBacklog: FactBacklog;
  names: KV;
  idempotency: KV;
  envs: EnvironmentStore;
  /** KV `tokens`: the scheduler mints and revokes sessions' service tokens there. */
  tokens: KV;
  /** Keys of sealed checkpoints and environment snapshots (KV `seal-keys`). */
  sealKeys: SealKeys;
  waiters: SessionWaiters;
  presence: PresenceTracker;
  leases: LeaseTracker;
  /** The environment part of a start command (empty for a scratch session). */
  bootEnvironment(s: Session): Promise<{ environment?: BootEnvironment }>;
  /** Records an environment snapshot fact (only while its setup hash still matches). */
  applyEnvSnapshot(fact: Extract<RunnerFact, { type: "env_snapshot" }>): Promise<void>;
  /** Asks for a placement pass soon (coalesced). */
  requestPlacement(): void;
  /** Begins placing a session beside its record's create (idle system only); see Placer.placeOnWrite. */
  placeOnWrite(s: Session): ((written: boolean) => void) | undefined;
  /** Runs once when a session becomes terminal: revoke its token, end its children. */
  onTerminal(s: Session): void;
}
