import { Counter, Registry } from "prom-client";

/** Counters every bus user shares; registered once per service registry. */
export interface BusMetrics {
  registry: Registry;
  /** Messages that failed their schema on receipt; terminated, never retried. */
  invalidMessages: Counter<"subject">;
  /** Handler failures, by whether the message was retried. */
  handlerErrors: Counter<"subject" | "outcome">;
  /** Failed deliveries nak'ed to be delivered again, by stream. */
  redeliveries: Counter<"subject">;
  /** Messages that failed on their last allowed delivery and were terminated, by stream (`RedeliveryPolicy`). */
  parkedMessages: Counter<"subject">;
}

export function createBusMetrics(registry = new Registry()): BusMetrics {
  return {
    registry,
    invalidMessages: new Counter({
      name: "paddock_invalid_messages_total",
      help: "Bus messages that failed schema validation on receipt",
      labelNames: ["subject"],
      registers: [registry],
    }),
    handlerErrors: new Counter({
      name: "paddock_handler_errors_total",
      help: "Bus message handler failures by outcome (term, nak or parked)",
      labelNames: ["subject", "outcome"],
      registers: [registry],
    }),
    redeliveries: new Counter({
      name: "paddock_message_redeliveries_total",
      help: "Failed bus message deliveries nak'ed for another delivery, by stream",
      labelNames: ["subject"],
      registers: [registry],
    }),
    parkedMessages: new Counter({
      name: "paddock_messages_parked_total",
      help: "Bus messages terminated after failing on their last allowed delivery, by stream",
      labelNames: ["subject"],
      registers: [registry],
    }),
  };
}
