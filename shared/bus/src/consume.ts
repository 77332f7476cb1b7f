import type { ConsumerMessages, JetStreamClient, JsMsg } from "@nats-io/jetstream";
import type { z } from "zod";
import { PaddockError } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { decodeJson } from "./codec.ts";
import { recreateWhenLost, SettledFloor, type ConsumerRecovery } from "./consumer-recovery.ts";
import type { BusMetrics } from "./metrics.ts";
import { DEFAULT_REDELIVERY, redeliveryDelayMs, shouldPark, type RedeliveryPolicy, type Settlement } from "./redelivery.ts";

export interface ConsumeOptions<S extends z.ZodType> {
  stream: string;
  consumer: string;
  schema: S;
  metrics: BusMetrics;
  log: Logger;
  /** Backoff and bound of redeliveries of a failing message (default `DEFAULT_REDELIVERY`). */
  redelivery?: Partial<RedeliveryPolicy>;
  /** Observes how each delivered message was settled (tests, tracing). */
  onSettled?: (msg: JsMsg, settlement: Settlement) => void;
  handler: (value: z.infer<S>, msg: JsMsg) => Promise<void>;
  /**
   * Handle up to `concurrency` messages at once, in order within a lane: two
   * messages with the same key (e.g. facts about one session) never overlap.
   * Without it, messages are handled one at a time.
   */
  lanes?: { concurrency: number; keyOf: (msg: JsMsg) => string };
  /** Messages to ack without decoding (e.g. KV delete markers on a change feed). */
  skip?: (msg: JsMsg) => boolean;
  /** For a consumer the server may lose (memory-backed): how to make it again without skipping an unsettled message. */
  recovery?: ConsumerRecovery;
}

export interface ConsumerHandle {
  stop(): Promise<void>;
  /** Resolves when the consume loop has ended. */
  done: Promise<void>;
}

/**
 * Pull options of every long-lived consumer. A pull request lives `expires`
 * and the server heartbeats it at half that; a client that misses two
 * heartbeats pulls again. With the client's default (30 s) a consumer whose
 * leader moved (a broker node died) sat idle for up to ~45 s (`pnpm chaos`,
 * broker); 5 s bounds that near 10 s, at one idle pull per consumer every 5 s.
 */
export const PULL_OPTIONS = { max_messages: 256, expires: 5_000 } as const;

/**
 * Consumes a durable consumer with validation at the boundary. An invalid
 * message is terminated and counted; a terminal handler error (a PaddockError
 * that is not retryable) is terminated; anything else is nak'ed with a delay
 * that backs off on the delivery count, and parked once it used its last
 * delivery (`RedeliveryPolicy`). A handler never crashes the loop.
 */
export async function consumeTyped<S extends z.ZodType>(
  js: JetStreamClient,
  opts: ConsumeOptions<S>,
): Promise<ConsumerHandle> {
  const consumer = await js.consumers.get(opts.stream, opts.consumer);
  const messages: ConsumerMessages = await consumer.consume(PULL_OPTIONS);
  const floor = opts.recovery ? new SettledFloor(opts.recovery.floor) : undefined;
  if (floor && opts.recovery) recreateWhenLost(messages, floor, opts.recovery, opts.log);
  const done = opts.lanes ? consumeInLanes(messages, opts, opts.lanes, floor) : (async () => {
    for await (const msg of messages) await handleOne(msg, opts, floor);
  })();
  return {
    stop: async () => {
      await messages.close();
      await done;
    },
    done,
  };
}

async function consumeInLanes<S extends z.ZodType>(
  messages: ConsumerMessages,
  opts: ConsumeOptions<S>,
  lanes: { concurrency: number; keyOf: (msg: JsMsg) => string },
  floor: SettledFloor | undefined,
): Promise<void> {
  const tails = new Map<string, Promise<void>>();
  let inflight = 0;
  const slotFreed: Array<() => void> = [];
  for await (const msg of messages) {
    while (inflight >= lanes.concurrency) await new Promise<void>((r) => slotFreed.push(r));
    inflight++;
    const key = lanes.keyOf(msg);
    const run: Promise<void> = (tails.get(key) ?? Promise.resolve())
      .then(() => handleOne(msg, opts, floor))
      .finally(() => {
        inflight--;
        slotFreed.shift()?.();
        if (tails.get(key) === run) tails.delete(key);
      });
    tails.set(key, run);
  }
  await Promise.all(tails.values());
}

async function handleOne<S extends z.ZodType>(msg: JsMsg, opts: ConsumeOptions<S>, floor: SettledFloor | undefined): Promise<void> {
  floor?.delivered(msg.seq);
  const settlement = await settle(msg, opts);
  if (settlement.outcome !== "nak") floor?.settled(msg.seq);
  opts.onSettled?.(msg, settlement);
}

/** Handles one message and settles it: ack, term, nak (to be redelivered), or park. */
async function settle<S extends z.ZodType>(msg: JsMsg, opts: ConsumeOptions<S>): Promise<Settlement> {
  if (opts.skip?.(msg)) {
    msg.ack();
    return { outcome: "ack" };
  }
  const decoded = decodeJson(opts.schema, msg.data);
  if (!decoded.ok) {
    opts.metrics.invalidMessages.inc({ subject: msg.subject });
    opts.log.warn({ subject: msg.subject, seq: msg.seq, reason: decoded.reason }, "invalid message terminated");
    msg.term(`invalid: ${decoded.reason}`);
    return { outcome: "term", reason: "invalid" };
  }
  try {
    await opts.handler(decoded.value, msg);
    msg.ack();
    return { outcome: "ack" };
  } catch (err) {
    return settleFailure(msg, opts, err);
  }
}

function settleFailure<S extends z.ZodType>(msg: JsMsg, opts: ConsumeOptions<S>, err: unknown): Settlement {
  if (err instanceof PaddockError && !err.retryable) {
    opts.metrics.handlerErrors.inc({ subject: opts.stream, outcome: "term" });
    opts.log.warn({ subject: msg.subject, seq: msg.seq, code: err.code, reason: err.message }, "message terminated");
    msg.term(err.code);
    return { outcome: "term", reason: "terminal" };
  }
  const policy = { ...DEFAULT_REDELIVERY, ...opts.redelivery };
  const deliveryCount = msg.info.deliveryCount;
  if (shouldPark(deliveryCount, policy)) {
    opts.metrics.handlerErrors.inc({ subject: opts.stream, outcome: "parked" });
    opts.metrics.parkedMessages.inc({ subject: opts.stream });
    // The stream sequence finds the message again (it stays in the stream; only this consumer gave up on it).
    opts.log.error({ err, stream: opts.stream, consumer: opts.consumer, subject: msg.subject, seq: msg.seq, deliveryCount }, "message parked: it kept failing");
    msg.term(`parked after ${deliveryCount} deliveries`);
    return { outcome: "parked", deliveryCount };
  }
  const delayMs = redeliveryDelayMs(err, deliveryCount, policy);
  opts.metrics.handlerErrors.inc({ subject: opts.stream, outcome: "nak" });
  opts.metrics.redeliveries.inc({ subject: opts.stream });
  opts.log.warn({ err, subject: msg.subject, seq: msg.seq, deliveryCount, delayMs }, "message will be retried");
  msg.nak(delayMs);
  return { outcome: "nak", delayMs, deliveryCount };
}
