// The handle every handler takes, as types only: it imports state/, config.ts
// and metrics.ts and nothing that imports it back, so any folder may import
// it without a cycle (the part the write helpers need is state/'s WriteContext).
import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import type { BootEnvironment, Runner, RunnerFact, Session } from "@paddock/contracts";
import type { BusMetrics } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { FactBacklog } from "./state/fact-backlog.ts";
import type { SchedulerConfig } from "./config.ts";
import type { SchedulerMetrics } from "./metrics.ts";
import type { Versioned } from "./state/store.ts";
import type { WriteContext } from "./state/writes.ts";
import type { PresenceTracker } from "./state/presence.ts";
import type { LeaseTracker } from "./state/lease-tracker.ts";
import type { EnvironmentStore } from "./state/environment-store.ts";
import type { SessionWaiters } from "./state/waiters.ts";
import type { SealKeys } from "./state/seal-keys.ts";
import type { SessionIndex } from "./state/session-index.ts";
import type { CoalescedReads } from "./state/coalesce.ts";

/** Everything the scheduler's handlers share; built once by createScheduler. */
export interface SchedulerContext extends WriteContext {
  nc: NatsConnection;
  js: JetStreamClient;
  config: SchedulerConfig;
  log: Logger;
  bus: BusMetrics;
  metrics: SchedulerMetrics;
  /** Per-workspace counts and the queued set, maintained by sessionView. */
  sessionIndex: SessionIndex;
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
}
