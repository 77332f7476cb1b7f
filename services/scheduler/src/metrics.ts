// The scheduler's own metrics, in one leaf module: the context holds them and
// the policies count into them, so they may import nothing of the scheduler.
import { Counter, type Registry } from "prom-client";

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

export interface CheckpointGcMetrics {
  /** Objects deleted, by store. */
  collected: Counter<"store">;
  /** Seal keys deleted whose object was already gone. */
  orphanKeys: Counter;
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
  };
}
