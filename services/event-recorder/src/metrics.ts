import { Counter, type Registry } from "prom-client";
import { createBusMetrics, type BusMetrics } from "@paddock/bus";

/** Every metric of the event recorder, all made by createRecorderMetrics. */
export interface RecorderMetrics extends BusMetrics {
  /** Audit events published, by kind (session, environment, runner). */
  recorded: Counter<"kind">;
  /** Runner revisions whose previous revision was gone, so no event could be derived. */
  gaps: Counter;
  /** Webhook delivery attempts by outcome (delivered, retrying, failed). */
  webhookAttempts: Counter<"outcome">;
}

export function createRecorderMetrics(registry?: Registry): RecorderMetrics {
  const bus = createBusMetrics(registry);
  const registers = [bus.registry];
  return {
    ...bus,
    recorded: new Counter({
      name: "paddock_audit_events_total",
      help: "Audit events published (including republishes AUDIT deduplicated)",
      labelNames: ["kind"],
      registers,
    }),
    gaps: new Counter({
      name: "paddock_audit_runner_gaps_total",
      help: "Runner revisions whose previous revision was no longer retained, so no event could be derived",
      registers,
    }),
    webhookAttempts: new Counter({
      name: "paddock_webhook_attempts_total",
      help: "Webhook delivery attempts by outcome (delivered, retrying, failed)",
      labelNames: ["outcome"],
      registers,
    }),
  };
}
