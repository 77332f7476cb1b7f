import type { ConsumerMessages } from "@nats-io/jetstream";
import type { Logger } from "@paddock/logging";

/**
 * How a consumer the server lost is made again. A memory-backed consumer
 * (`mem_storage`: the server writes no state file on every delivery and ack)
 * does not survive a restart of a single broker, nor of a whole cluster.
 */
export interface ConsumerRecovery {
  /** Stream sequence through which every message was settled before this consume began (the consumer's ack floor, or the stream's last sequence when it was created to deliver new). */
  floor: number;
  /** Creates the consumer again so that it delivers from stream sequence `settledThrough + 1`. */
  create: (settledThrough: number) => Promise<void>;
}

/**
 * The stream sequence through which every message delivered here was settled
 * (acked or terminated). A nak'ed message stays open until it is redelivered
 * and settled, so a consumer recreated after the floor never skips it; it may
 * see again messages settled above an open one (at-least-once, as with any
 * redelivery).
 */
export class SettledFloor {
  private readonly open = new Set<number>();
  private highest: number;

  constructor(initial: number) {
    this.highest = initial;
  }

  delivered(streamSeq: number): void {
    this.open.add(streamSeq);
    if (streamSeq > this.highest) this.highest = streamSeq;
  }

  settled(streamSeq: number): void {
    this.open.delete(streamSeq);
  }

  /** Every message at or below this sequence was settled. */
  value(): number {
    let lowestOpen = Number.POSITIVE_INFINITY;
    for (const seq of this.open) if (seq < lowestOpen) lowestOpen = seq;
    return lowestOpen === Number.POSITIVE_INFINITY ? this.highest : lowestOpen - 1;
  }
}

/**
 * Watches a consume's notifications and recreates the consumer when the
 * server says it is gone; nats.js keeps looking for it (with backoff) and
 * pulls again once it exists. A failed attempt is retried on the next
 * notification.
 */
export function recreateWhenLost(messages: ConsumerMessages, floor: SettledFloor, recovery: ConsumerRecovery, log: Logger): void {
  let creating = false;
  void (async () => {
    for await (const status of messages.status()) {
      if (status.type !== "consumer_not_found" && status.type !== "consumer_deleted") continue;
      if (creating) continue;
      creating = true;
      const settledThrough = floor.value();
      log.warn({ settledThrough }, "consumer lost by the server; creating it again");
      recovery
        .create(settledThrough)
        .catch((err: unknown) => log.warn({ err }, "consumer not recreated yet"))
        .finally(() => (creating = false));
    }
  })().catch((err: unknown) => log.warn({ err }, "consumer status watch ended"));
}
