import { randomBytes } from "node:crypto";
import type { KV } from "@nats-io/kv";
import { decodeJson, isWrongLastSequence, SecretBox } from "@paddock/bus";
import {
  Buckets,
  ConflictError,
  HttpApi,
  MAX_WEBHOOKS_PER_WORKSPACE,
  NotFoundError,
  WebhookDeliveries,
  webhookKey,
  WebhookRecord,
  type Scope,
  type WebhookInfo,
} from "@paddock/contracts";
import { checkOutboundTarget } from "@paddock/service";
import { Action, lazyKv } from "../auth/auth.ts";
import { workspaceResource, type GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";

/** Random bytes of a signing secret (the Standard Webhooks libraries take 24–64). */
const SECRET_BYTES = 24;

/**
 * Webhooks' public face (admins of the workspace): register a URL (its
 * signing secret answered once, stored sealed with PADDOCK_SECRETS_KEY in KV
 * `webhooks`), list them, remove one, read its recent attempts. Delivering
 * is the event recorder's (services/event-recorder/src/webhooks/).
 */
export function webhookRoutes(ctx: GatewayContext): Route[] {
  const webhooks = lazyKv(ctx.deps.nc, Buckets.webhooks);
  const deliveries = lazyKv(ctx.deps.nc, Buckets.webhookDeliveries);
  const box = new SecretBox(ctx.deps.config.secretsKey);

  const records = async (kv: KV, workspaceId: string): Promise<WebhookInfo[]> => {
    const prefix = `${workspaceId}.`;
    const out: WebhookInfo[] = [];
    for await (const key of await kv.keys(`${prefix}*`)) {
      const entry = key.startsWith(prefix) ? await kv.get(key) : null;
      const decoded = entry?.operation === "PUT" ? decodeJson(WebhookRecord, entry.value) : undefined;
      if (decoded?.ok && decoded.value.info.workspaceId === workspaceId) out.push(decoded.value.info);
    }
    return out.sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : 1));
  };

  /** The workspace's webhook of that id (not_found otherwise, another workspace's included). */
  const webhookOf = async (scope: Scope, id: string): Promise<WebhookInfo> => {
    const entry = await (await webhooks()).get(webhookKey(scope.workspaceId, id));
    const decoded = entry?.operation === "PUT" ? decodeJson(WebhookRecord, entry.value) : undefined;
    if (!decoded?.ok || decoded.value.info.workspaceId !== scope.workspaceId) throw new NotFoundError("webhook");
    return decoded.value.info;
  };

  return [
    ctx.serve(HttpApi.createWebhook, async ({ caller: { scope }, body: readBody }) => {
      const body = await readBody();
      await ctx.authorizer.authorize(scope, Action.manageWebhooks, workspaceResource(scope));
      await checkOutboundTarget(body.url, ctx.deps.config.webhookAllowPrivate);
      const kv = await webhooks();
      if ((await records(kv, scope.workspaceId)).length >= MAX_WEBHOOKS_PER_WORKSPACE) throw new ConflictError(`the workspace has ${MAX_WEBHOOKS_PER_WORKSPACE} webhooks already`);
      const info: WebhookInfo = {
        id: ctx.deps.newId(),
        workspaceId: scope.workspaceId,
        url: body.url,
        events: body.events ?? [],
        ...(body.description !== undefined ? { description: body.description } : {}),
        createdAt: ctx.deps.now(),
        createdBy: scope.actor.id,
      };
      const secret = `whsec_${randomBytes(SECRET_BYTES).toString("base64")}`;
      const key = webhookKey(scope.workspaceId, info.id);
      const record: WebhookRecord = { info, sealedSecret: Buffer.from(box.seal(key, secret)).toString("base64") };
      try {
        await kv.create(key, JSON.stringify(record));
      } catch (err) {
        if (isWrongLastSequence(err)) throw new ConflictError("a webhook of that id exists", { cause: err });
        throw err;
      }
      return { status: 201, body: { ...info, secret } };
    }),

    ctx.serve(HttpApi.listWebhooks, async ({ caller: { scope } }) => {
      await ctx.authorizer.authorize(scope, Action.manageWebhooks, workspaceResource(scope));
      return { status: 200, body: { webhooks: await records(await webhooks(), scope.workspaceId) } };
    }),

    ctx.serve(HttpApi.deleteWebhook, async ({ caller: { scope }, params }) => {
      await ctx.authorizer.authorize(scope, Action.manageWebhooks, workspaceResource(scope));
      const info = await webhookOf(scope, params.id);
      // Purged, not deleted: no revision of the sealed secret stays behind a marker. The recorder then drops its consumer.
      await (await webhooks()).purge(webhookKey(scope.workspaceId, info.id));
      return { status: 200, body: info };
    }),

    ctx.serve(HttpApi.listWebhookDeliveries, async ({ caller: { scope }, params }) => {
      await ctx.authorizer.authorize(scope, Action.manageWebhooks, workspaceResource(scope));
      const info = await webhookOf(scope, params.id);
      const entry = await (await deliveries()).get(webhookKey(scope.workspaceId, info.id));
      const decoded = entry?.operation === "PUT" ? decodeJson(WebhookDeliveries, entry.value) : undefined;
      return { status: 200, body: decoded?.ok ? decoded.value : { deliveries: [] } };
    }),
  ];
}
