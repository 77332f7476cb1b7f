import { Counter, Registry } from "prom-client";

/** Counters every bus user shares; registered once per service registry. */
export interface BusMetrics {
  registry: Registry;
  /** Messages that failed their schema on receipt; terminated, never retried. */
  invalidMessages: Counter<"subject">;
  /** Handler failures, by whether the message was retried. */
  handlerErrors: Counter<"subject" | "outcome">;
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
      help: "Bus message handler failures by outcome (term or nak)",
      labelNames: ["subject", "outcome"],
      registers: [registry],
    }),
  };
}
