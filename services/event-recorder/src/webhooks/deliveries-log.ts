import type { KV } from "@nats-io/kv";
import { decodeJson, isWrongLastSequence } from "@paddock/bus";
import { WEBHOOK_DELIVERIES_KEPT, WebhookDeliveries, type WebhookDelivery } from "@paddock/contracts";

/** Tries of one compare-and-set (replicas deliver one webhook's events side by side). */
const CAS_TRIES = 8;

/**
 * A webhook's recent attempts in KV `webhook-deliveries` (newest first, the
 * last WEBHOOK_DELIVERIES_KEPT): each one prepended by compare-and-set on the
 * record's revision, so concurrent attempts (several in flight, several
 * recorder replicas) all land.
 */
export async function recordDelivery(kv: KV, key: string, delivery: WebhookDelivery): Promise<void> {
  for (let i = 0; i < CAS_TRIES; i++) {
    const entry = await kv.get(key);
    const current = entry?.operation === "PUT" ? decodeJson(WebhookDeliveries, entry.value) : undefined;
    const kept = current?.ok ? current.value.deliveries : [];
    const next: WebhookDeliveries = { deliveries: [delivery, ...kept].slice(0, WEBHOOK_DELIVERIES_KEPT) };
    try {
      if (entry) await kv.update(key, JSON.stringify(next), entry.revision);
      else await kv.create(key, JSON.stringify(next));
      return;
    } catch (err) {
      if (!isWrongLastSequence(err)) throw err;
    }
  }
  throw new Error("the deliveries record kept changing under its writer");
}
