import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type ConsumerMessages, type JetStreamManager, type JsMsg } from "@nats-io/jetstream";
import { Kvm, type KV, type KvWatchEntry } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { decodeJson, isConsumerNotFound, SecretBox } from "@paddock/bus";
import {
  AuditEvent,
  Buckets,
  Streams,
  Subjects,
  WEBHOOK_ATTEMPT_TIMEOUT_MS,
  webhookConsumerName,
  webhookEventType,
  webhookKey,
  WebhookRecord,
  webhookWants,
  type WebhookDelivery,
  type WebhookInfo,
} from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { Counter } from "prom-client";
import { attemptDelivery } from "./attempt.ts";
import { recordDelivery } from "./deliveries-log.ts";

export interface WebhookSettings {
  /** The wait before each retry after a failed attempt; the delivery fails after the last. */
  retryScheduleMs: readonly number[];
  allowPrivate: boolean;
  secretsKey: Buffer | undefined;
}

export interface DispatcherDeps {
  nc: NatsConnection;
  log: Logger;
  now: () => number;
  settings: WebhookSettings;
  /** Attempts by outcome (delivered, retrying, failed). */
  attempts: Counter<"outcome">;
}

/** Deliveries of one webhook in flight at once (its consumer's max_ack_pending): a slow receiver holds these, nothing else. */
const IN_FLIGHT_PER_WEBHOOK = 16;
/** Longer than an attempt and its record: a delivery in progress is not handed to another replica. */
const ACK_WAIT_NS = (WEBHOOK_ATTEMPT_TIMEOUT_MS + 50_000) * 1_000_000;
/** After a feed's consume ended on its own (its consumer lost), the wait before it is made again. */
const REFEED_MS = 1_000;

/**
 * Delivers each webhook's events (the event recorder's side of webhooks):
 * watches KV `webhooks`, and for each webhook keeps a durable consumer on
 * AUDIT (the workspace's subjects, from the webhook's creation) that every
 * recorder replica consumes, so each event is attempted by one of them at a
 * time. A failed attempt is retried after the schedule's next wait (a nak
 * with that delay), then marked failed (terminated); each attempt is recorded
 * in KV `webhook-deliveries`. Webhooks are independent: a slow or dead
 * receiver holds only its own IN_FLIGHT_PER_WEBHOOK deliveries, never the
 * audit stream or another webhook.
 */
export class WebhookDispatcher {
  private readonly feeds = new Map<string, WebhookFeed>();
  private watch: AsyncIterable<KvWatchEntry> & { stop(): void } | undefined;
  private stopped = false;
  private readonly box: SecretBox;

  constructor(private readonly deps: DispatcherDeps) {
    this.box = new SecretBox(deps.settings.secretsKey);
  }

  async start(): Promise<void> {
    const kvm = new Kvm(this.deps.nc);
    const [webhooks, deliveries, jsm] = await Promise.all([kvm.open(Buckets.webhooks), kvm.open(Buckets.webhookDeliveries), jetstreamManager(this.deps.nc)]);
    const watch = await webhooks.watch();
    this.watch = watch;
    void (async () => {
      for await (const entry of watch) {
        if (this.stopped) break;
        await this.apply(entry, jsm, deliveries).catch((err: unknown) => this.deps.log.error({ err, key: entry.key }, "webhook change not applied"));
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.watch?.stop();
    await Promise.all([...this.feeds.values()].map((f) => f.stop()));
    this.feeds.clear();
  }

  private async apply(entry: KvWatchEntry, jsm: JetStreamManager, deliveries: KV): Promise<void> {
    const current = this.feeds.get(entry.key);
    if (entry.operation !== "PUT") {
      this.feeds.delete(entry.key);
      await current?.stop();
      const [workspaceId, webhookId] = entry.key.split(".") as [string, string];
      await jsm.consumers.delete(Streams.audit, webhookConsumerName(workspaceId, webhookId)).catch((err: unknown) => {
        if (!isConsumerNotFound(err)) throw err;
      });
      await deliveries.purge(entry.key);
      return;
    }
    if (current) return;
    const decoded = decodeJson(WebhookRecord, entry.value);
    if (!decoded.ok || webhookKey(decoded.value.info.workspaceId, decoded.value.info.id) !== entry.key) {
      this.deps.log.warn({ key: entry.key }, "webhook record is malformed: not delivered");
      return;
    }
    let secret: string;
    try {
      secret = this.box.open(entry.key, Buffer.from(decoded.value.sealedSecret, "base64"));
    } catch (err) {
      this.deps.log.error({ key: entry.key, reason: err instanceof Error ? err.message : String(err) }, "webhook secret does not open with this recorder's PADDOCK_SECRETS_KEY: not delivered");
      return;
    }
    const feed = new WebhookFeed(this.deps, decoded.value.info, secret, (d) => recordDelivery(deliveries, entry.key, d));
    this.feeds.set(entry.key, feed);
    await feed.start(jsm);
  }
}

/** One webhook's consumer and its deliveries. */
class WebhookFeed {
  private messages: ConsumerMessages | undefined;
  private stopped = false;
  private readonly name: string;

  constructor(
    private readonly deps: DispatcherDeps,
    private readonly info: WebhookInfo,
    private readonly secret: string,
    private readonly record: (d: WebhookDelivery) => Promise<void>,
  ) {
    this.name = webhookConsumerName(info.workspaceId, info.id);
  }

  async start(jsm: JetStreamManager): Promise<void> {
    await jsm.consumers.add(Streams.audit, {
      durable_name: this.name,
      filter_subject: Subjects.auditWorkspace(this.info.workspaceId),
      ack_policy: AckPolicy.Explicit,
      // Every event from the webhook's creation, even those recorded while no recorder ran.
      deliver_policy: DeliverPolicy.StartTime,
      opt_start_time: new Date(this.info.createdAt).toISOString(),
      ack_wait: ACK_WAIT_NS,
      max_deliver: -1,
      max_ack_pending: IN_FLIGHT_PER_WEBHOOK,
    });
    void this.run();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.messages?.close();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      try {
        const consumer = await jetstream(this.deps.nc).consumers.get(Streams.audit, this.name);
        this.messages = await consumer.consume({ max_messages: IN_FLIGHT_PER_WEBHOOK, expires: 5_000 });
        for await (const msg of this.messages) void this.handle(msg).catch((err: unknown) => this.deps.log.warn({ err, webhookId: this.info.id }, "webhook delivery not settled; redelivered after the ack wait"));
      } catch (err) {
        if (!this.stopped) this.deps.log.warn({ err, webhookId: this.info.id }, "webhook feed stopped; starting it again");
      }
      if (!this.stopped) await new Promise((resolve) => setTimeout(resolve, REFEED_MS).unref());
    }
  }

  private async handle(msg: JsMsg): Promise<void> {
    const decoded = decodeJson(AuditEvent, msg.data);
    if (!decoded.ok) {
      msg.term("not an audit event");
      return;
    }
    const event = decoded.value;
    const type = webhookEventType(event);
    if (!webhookWants(this.info.events, type)) {
      msg.ack();
      return;
    }
    const { settings, now } = this.deps;
    const body = JSON.stringify({ type, timestamp: new Date(event.at).toISOString(), data: { ...event, seq: msg.seq } });
    const result = await attemptDelivery({ url: this.info.url, secret: this.secret, id: event.id, body, now, timeoutMs: WEBHOOK_ATTEMPT_TIMEOUT_MS, allowPrivate: settings.allowPrivate });
    const attempt = msg.info.deliveryCount;
    const delay = result.delivered ? undefined : settings.retryScheduleMs[attempt - 1];
    const outcome = result.delivered ? "delivered" : delay !== undefined ? "retrying" : "failed";
    const at = now();
    const delivery: WebhookDelivery = {
      eventId: event.id,
      type,
      attempt,
      at,
      outcome,
      ...(result.status !== undefined ? { status: result.status } : {}),
      ...(result.error !== undefined ? { error: result.error.slice(0, 256) } : {}),
      durationMs: result.durationMs,
      ...(delay !== undefined ? { nextAttemptAt: at + delay } : {}),
    };
    // The record is what GET …/deliveries shows; a failure to write it does not change the delivery.
    await this.record(delivery).catch((err: unknown) => this.deps.log.warn({ err, webhookId: this.info.id }, "webhook attempt not recorded"));
    this.deps.attempts.inc({ outcome });
    if (outcome === "delivered") msg.ack();
    else if (outcome === "retrying") msg.nak(delay);
    else msg.term("the last attempt failed");
  }
}
