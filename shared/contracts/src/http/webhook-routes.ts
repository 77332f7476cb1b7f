import { z } from "zod";
import { Id } from "../ids.ts";
import { CreatedWebhook, CreateWebhookBody, WebhookDeliveries, WebhookInfo, WebhookList } from "../webhooks.ts";
import { httpRoute, json, jsonBody } from "./route.ts";

/* The webhooks routes (issue 28 item 4): a workspace's admins register URLs its audit events are delivered to. */

const WebhookParams = z.object({ id: Id }).strict();

export const WebhookRoutes = {
  createWebhook: httpRoute({
    method: "POST",
    path: "/v1/webhooks",
    summary:
      "Register a URL the workspace's audit events (or those matching `events`) are delivered to, signed per the Standard Webhooks specification (admins). The signing secret is answered this once. A URL on a private, loopback or link-local address (or a name resolving to one) is refused unless the operator set PADDOCK_WEBHOOK_ALLOW_PRIVATE=1.",
    body: jsonBody(CreateWebhookBody),
    responses: [json(CreatedWebhook, [201])],
    errors: ["forbidden", "conflict", "too_large"],
  }),
  listWebhooks: httpRoute({
    method: "GET",
    path: "/v1/webhooks",
    summary: "The workspace's webhooks (admins), never their secrets.",
    responses: [json(WebhookList)],
    errors: ["forbidden"],
  }),
  deleteWebhook: httpRoute({
    method: "DELETE",
    path: "/v1/webhooks/:id",
    summary: "Remove a webhook (admins): its deliveries stop, events not yet delivered are not.",
    params: WebhookParams,
    responses: [json(WebhookInfo)],
    errors: ["forbidden", "not_found"],
  }),
  listWebhookDeliveries: httpRoute({
    method: "GET",
    path: "/v1/webhooks/:id/deliveries",
    summary: "A webhook's recent delivery attempts, newest first (admins): delivered, retrying (with the next attempt's time) or failed.",
    params: WebhookParams,
    responses: [json(WebhookDeliveries)],
    errors: ["forbidden", "not_found"],
  }),
} as const;
