// The scheduler's own metrics, in one leaf module: the context holds them and
// the policies count into them, so they may import nothing of the scheduler.
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

/** What the fleet gauges read at each scrape (the scheduler's views; set once they exist). */
export interface FleetSource {
  sessions(): Iterable<{ poolId?: string | undefined; state: string }>;
  runners(): Iterable<{ poolId: string; id: string; state: string; capacityUsed: number; capacityTotal: number }>;
}

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
  /** Seconds from a session's last revision while queued to its placement (create → placed, resume → placed). */
  placementSeconds: Histogram;
  /** Where the fleet gauges (sessions by pool and state, runner slots) read from: set by createScheduler. */
  setFleetSource(source: FleetSource): void;
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
    placementSeconds: new Histogram({
      name: "paddock_placement_seconds",
      help: "Time from a session's queued revision to its placement on a runner",
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    }),
    setFleetSource: fleetGauges(registry),
    secretsRefused: new Counter({
      name: "paddock_secrets_refused_total",
      help: "Runner requests for session secrets that were refused",
      labelNames: ["reason"],
      registers: [registry],
    }),
    checkpointGc: createCheckpointGcMetrics(registry),
  };
}

export interface CheckpointGcMetrics {
  /** Objects deleted, by store. */
  collected: Counter<"store">;
  /** Seal keys deleted whose object was already gone. */
  orphanKeys: Counter;
  /** Checkpoint chunks deleted (docs/decisions/0062). */
  chunks: Counter;
}

export function createCheckpointGcMetrics(registry: Registry): CheckpointGcMetrics {
  return {
    collected: new Counter({
      name: "paddock_checkpoint_objects_collected_total",
      help: "Checkpoint and environment snapshot objects deleted because no live record references them",
      labelNames: ["store"],
      registers: [registry],
    }),
    orphanKeys: new Counter({
      name: "paddock_seal_keys_collected_total",
      help: "Seal keys deleted because their object no longer exists",
      registers: [registry],
    }),
    chunks: new Counter({
      name: "paddock_checkpoint_chunks_collected_total",
      help: "Chunks of incremental checkpoints deleted because no kept manifest names them",
      registers: [registry],
    }),
  };
}

/** Sessions by pool and state, runner slots by pool, runner and kind: computed at each scrape from the views. */
function fleetGauges(registry: Registry): (source: FleetSource) => void {
  let source: FleetSource | undefined;
  new Gauge({
    name: "paddock_sessions",
    help: "Sessions by pool (none: not placed) and state",
    labelNames: ["pool", "state"],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of source?.sessions() ?? []) this.inc({ pool: s.poolId ?? "none", state: s.state });
    },
  });
  new Gauge({
    name: "paddock_runner_slots",
    help: "Runner capacity in session slots: total and used, by pool, runner and runner state",
    labelNames: ["pool", "runner", "state", "kind"],
    registers: [registry],
    collect() {
      this.reset();
      for (const r of source?.runners() ?? []) {
        this.set({ pool: r.poolId, runner: r.id, state: r.state, kind: "total" }, r.capacityTotal);
        this.set({ pool: r.poolId, runner: r.id, state: r.state, kind: "used" }, r.capacityUsed);
      }
    },
  });
  return (s) => {
    source = s;
  };
}
