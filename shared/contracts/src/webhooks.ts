import { z } from "zod";
import { AuditAction, ResourceKind, type AuditEvent } from "./audit.ts";
import { EpochMs, Id } from "./ids.ts";

/**
 * Webhooks (issue 28 item 4): a workspace's admins register URLs that
 * receive the workspace's audit events, each delivery signed as the Standard
 * Webhooks specification says (`webhook-id` is the audit event's id,
 * `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256>`), so
 * receivers verify them with that specification's own libraries. Records
 * live in KV `webhooks` under `<workspace>.<id>` (the signing secret sealed
 * with PADDOCK_SECRETS_KEY); each webhook has its own durable consumer on
 * AUDIT (the event recorder delivers); its recent attempts are in KV
 * `webhook-deliveries` under the same key.
 */

/** Webhooks one workspace may have. */
export const MAX_WEBHOOKS_PER_WORKSPACE = 32;
/** Attempts a webhook's deliveries list keeps (newest first). */
export const WEBHOOK_DELIVERIES_KEPT = 50;
/** The longest a receiver may take to answer one attempt. */
export const WEBHOOK_ATTEMPT_TIMEOUT_MS = 10_000;
/**
 * When an event's attempts happen, counted from its first one failing: the
 * Standard Webhooks specification's suggested schedule (5 s, 5 min, 30 min,
 * 2 h, 5 h, 10 h, 10 h), ~27.6 hours in all; after the last one fails the
 * delivery is marked `failed` and the webhook goes on with its next events.
 */
export const WEBHOOK_RETRY_SCHEDULE_MS = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000] as const;

/** What a webhook is told an event is: `<resource kind>.<action>`, e.g. `session.create`, `session.file.write`, `runner.lose`. */
export function webhookEventType(event: Pick<AuditEvent, "action" | "resource">): string {
  return `${event.resource.kind}.${event.action}`;
}

const eventTypes = new Set(ResourceKind.options.flatMap((kind) => Object.values(AuditAction).map((action) => `${kind}.${action}`)));
const eventPrefixes = new Set([...eventTypes].flatMap((type) => type.split(".").slice(0, -1).map((_, i, parts) => parts.slice(0, i + 1).join("."))));

/**
 * An event filter: `*` (every event), an event type (`session.create`), or a
 * prefix of some with `.*` (`session.*`, `session.agent.*`). Unknown types
 * are refused, so a typo never silently matches nothing.
 */
export const WebhookEventPattern = z
  .string()
  .max(64)
  .refine((p) => p === "*" || eventTypes.has(p) || (p.endsWith(".*") && eventPrefixes.has(p.slice(0, -2))), "must be *, an event type like session.create, or a prefix like session.*");

/** Whether an event of this type is one a webhook with these patterns wants (none: every event). */
export function webhookWants(patterns: readonly string[], type: string): boolean {
  if (patterns.length === 0) return true;
  return patterns.some((p) => p === "*" || p === type || (p.endsWith(".*") && type.startsWith(p.slice(0, -1))));
}

/** Where deliveries go: http(s), no credentials in it (a secret never sits in a URL), no fragment. */
export const WebhookUrl = z
  .string()
  .max(2048)
  .refine((raw) => {
    try {
      const u = new URL(raw);
      return (u.protocol === "https:" || u.protocol === "http:") && u.username === "" && u.password === "" && u.hash === "" && u.hostname !== "";
    } catch {
      return false;
    }
  }, "must be an http(s) URL without credentials or fragment");

/** The body of `POST /v1/webhooks`. */
export const CreateWebhookBody = z
  .object({
    url: WebhookUrl,
    /** Which events (WebhookEventPattern); absent or empty: every event of the workspace. */
    events: z.array(WebhookEventPattern).max(32).optional(),
    description: z.string().max(256).optional(),
  })
  .strict();
export type CreateWebhookBody = z.infer<typeof CreateWebhookBody>;

/** A webhook as the API shows it (never its secret). */
export const WebhookInfo = z
  .object({
    id: Id,
    workspaceId: Id,
    url: WebhookUrl,
    events: z.array(WebhookEventPattern),
    description: z.string().max(256).optional(),
    createdAt: EpochMs,
    createdBy: Id,
  })
  .strict();
export type WebhookInfo = z.infer<typeof WebhookInfo>;

/** The answer of `POST /v1/webhooks`: the webhook and its signing secret (`whsec_` + base64), shown this once. */
export const CreatedWebhook = WebhookInfo.extend({ secret: z.string().regex(/^whsec_[A-Za-z0-9+/]{32}$/) }).strict();
export type CreatedWebhook = z.infer<typeof CreatedWebhook>;

export const WebhookList = z.object({ webhooks: z.array(WebhookInfo) }).strict();

/** A webhook's record in KV `webhooks`: its info and its secret as a SecretBox envelope (base64), bound to its key. */
export const WebhookRecord = z.object({ info: WebhookInfo, sealedSecret: z.string().max(1024) }).strict();
export type WebhookRecord = z.infer<typeof WebhookRecord>;

/** The KV key of a webhook (and of its deliveries). */
export function webhookKey(workspaceId: string, webhookId: string): string {
  return `${workspaceId}.${webhookId}`;
}

/** The durable consumer on AUDIT that feeds one webhook. */
export function webhookConsumerName(workspaceId: string, webhookId: string): string {
  return `webhook-${workspaceId}-${webhookId}`;
}

/**
 * One attempt to deliver one event: `delivered` (a 2xx answer), `retrying`
 * (it failed; another attempt comes at `nextAttemptAt`), `failed` (the last
 * attempt failed) or `skipped` (the event is not one the webhook wants is
 * never listed). `error` says why an attempt failed, never the response body.
 */
export const WebhookDelivery = z
  .object({
    eventId: Id,
    type: z.string().max(64),
    attempt: z.number().int().positive(),
    at: EpochMs,
    outcome: z.enum(["delivered", "retrying", "failed"]),
    status: z.number().int().min(100).max(599).optional(),
    error: z.string().max(256).optional(),
    durationMs: z.number().int().nonnegative(),
    nextAttemptAt: EpochMs.optional(),
  })
  .strict();
export type WebhookDelivery = z.infer<typeof WebhookDelivery>;

/** `GET /v1/webhooks/:id/deliveries`, and a webhook's record in KV `webhook-deliveries`: newest first, at most WEBHOOK_DELIVERIES_KEPT. */
export const WebhookDeliveries = z.object({ deliveries: z.array(WebhookDelivery).max(WEBHOOK_DELIVERIES_KEPT) }).strict();
export type WebhookDeliveries = z.infer<typeof WebhookDeliveries>;
