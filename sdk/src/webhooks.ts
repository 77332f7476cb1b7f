import { HttpApi, type BodyInput, type CreatedWebhook, type WebhookDelivery, type WebhookInfo } from "@paddock/contracts";
import type { Transport } from "./transport.ts";

interface CallOptions {
  readonly signal?: AbortSignal;
}

/**
 * The workspace's webhooks (admins): deliveries are signed per Standard
 * Webhooks, so a receiver verifies them with that specification's libraries
 * and the `secret` answered by `create` (shown only then).
 */
export class Webhooks {
  constructor(private readonly t: Transport) {}

  create(body: BodyInput<typeof HttpApi.createWebhook>, opts: CallOptions = {}): Promise<CreatedWebhook> {
    return this.t.call(HttpApi.createWebhook, { body, signal: opts.signal });
  }

  list(opts: CallOptions = {}): Promise<WebhookInfo[]> {
    return this.t.call(HttpApi.listWebhooks, { signal: opts.signal }).then((r) => r.webhooks);
  }

  delete(id: string, opts: CallOptions = {}): Promise<WebhookInfo> {
    return this.t.call(HttpApi.deleteWebhook, { params: { id }, signal: opts.signal });
  }

  /** Its recent attempts, newest first. */
  deliveries(id: string, opts: CallOptions = {}): Promise<WebhookDelivery[]> {
    return this.t.call(HttpApi.listWebhookDeliveries, { params: { id }, signal: opts.signal }).then((r) => r.deliveries);
  }
}
