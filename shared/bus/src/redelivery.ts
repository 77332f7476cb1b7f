import { UnavailableError } from "@paddock/contracts";

/**
 * When a consumer tries a failing message again, and when it gives up. A
 * failed delivery is nak'ed with a delay that doubles with the delivery count
 * (`baseMs`, `2 × baseMs`, … up to `capMs`), unless the error says when to try
 * again (`UnavailableError.retryAfterMs`). The delivery that reaches
 * `maxDeliveries` and still fails is parked: terminated, logged with its
 * stream sequence (the message stays in the stream for an operator to find)
 * and counted in `paddock_messages_parked_total`.
 */
export interface RedeliveryPolicy {
  /** Delay after the first failed delivery. */
  baseMs: number;
  /** Longest delay between two deliveries. */
  capMs: number;
  /** Deliveries a failing message gets before it is parked; `Infinity` for a consumer that must never drop one. */
  maxDeliveries: number;
}

/**
 * 500 ms doubling to 30 s; parked at the 20th delivery, about 8 minutes of
 * failing (0.5 + 1 + … + 16 s, then 30 s apart): longer than a broker leader
 * election or a service restart, short enough that a poison message stops
 * costing a handler call every 500 ms forever.
 */
export const DEFAULT_REDELIVERY: RedeliveryPolicy = { baseMs: 500, capMs: 30_000, maxDeliveries: 20 };

/** How a delivered message was settled. */
export type Settlement =
  | { outcome: "ack" }
  | { outcome: "term"; reason: "invalid" | "terminal" }
  | { outcome: "nak"; delayMs: number; deliveryCount: number }
  | { outcome: "parked"; deliveryCount: number };

/** The delay before the next delivery of a message whose `deliveryCount`-th delivery failed with `err`. */
export function redeliveryDelayMs(err: unknown, deliveryCount: number, policy: RedeliveryPolicy): number {
  if (err instanceof UnavailableError && err.retryAfterMs !== undefined) return Math.max(0, err.retryAfterMs);
  // Exponent bounded so a huge delivery count cannot overflow to Infinity.
  const doublings = Math.min(Math.max(deliveryCount - 1, 0), 30);
  return Math.min(policy.capMs, policy.baseMs * 2 ** doublings);
}

/** True when a failed delivery used the last one the policy grants. */
export function shouldPark(deliveryCount: number, policy: RedeliveryPolicy): boolean {
  return deliveryCount >= policy.maxDeliveries;
}

/** For a consumer whose messages must never be dropped: it backs off, counts, and keeps trying. */
export const NEVER_PARK: Partial<RedeliveryPolicy> = { maxDeliveries: Number.POSITIVE_INFINITY };
