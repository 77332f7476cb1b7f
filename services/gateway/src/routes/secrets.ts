import type { ServerResponse } from "node:http";
import type { KV } from "@nats-io/kv";
import { SecretBox } from "@paddock/bus";
import { Buckets, NotFoundError, PutSecretBody, SECRET_BODY_MAX_BYTES, SecretName, secretKey } from "@paddock/contracts";
import { Action, lazyKv } from "../auth/auth.ts";
import { workspaceResource, type GatewayContext } from "../context.ts";
import { NoQuery, parseWith, queryObject, readJsonBody, route, sendJson, type Route } from "../http/http.ts";

/**
 * The secret store's public face: PUT stores a value (admins), GET lists
 * names, DELETE removes one. A value is read from the body, sealed and written
 * to KV `secrets`; it is never echoed, logged, put in an error or a record.
 * The runner reads it at boot (services/runner-agent/src/secrets.ts).
 */
export function secretRoutes(ctx: GatewayContext): Route[] {
  const secrets = lazyKv(ctx.deps.nc, Buckets.secrets);
  const box = new SecretBox(ctx.deps.config.secretsKey);
  const noContent = (res: ServerResponse) => {
    res.writeHead(204, { "cache-control": "no-store" });
    res.end();
  };
  const names = async (kv: KV, workspaceId: string): Promise<string[]> => {
    const out: string[] = [];
    const prefix = `${workspaceId}.`;
    for await (const k of await kv.keys(`${prefix}*`)) if (k.startsWith(prefix)) out.push(k.slice(prefix.length));
    return out.sort();
  };

  return [
    route("PUT", "/v1/secrets/:name", async ({ req, res, params, query }) => {
      const scope = await ctx.authenticate(req);
      parseWith(NoQuery, queryObject(query), "query");
      const name = parseWith(SecretName, params.name, "secret name");
      const body = parseWith(PutSecretBody, await readJsonBody(req, SECRET_BODY_MAX_BYTES), "body");
      await ctx.authorizer.authorize(scope, Action.putSecret, workspaceResource(scope));
      const key = secretKey(scope.workspaceId, name);
      await (await secrets()).put(key, box.seal(key, body.value));
      noContent(res);
    }),

    route("GET", "/v1/secrets", async ({ req, res, query }) => {
      const scope = await ctx.authenticate(req);
      parseWith(NoQuery, queryObject(query), "query");
      await ctx.authorizer.authorize(scope, Action.listSecrets, workspaceResource(scope));
      const list = await names(await secrets(), scope.workspaceId);
      sendJson(res, 200, { secrets: list.map((name) => ({ name })) });
    }),

    route("DELETE", "/v1/secrets/:name", async ({ req, res, params, query }) => {
      const scope = await ctx.authenticate(req);
      parseWith(NoQuery, queryObject(query), "query");
      const name = parseWith(SecretName, params.name, "secret name");
      await ctx.authorizer.authorize(scope, Action.deleteSecret, workspaceResource(scope));
      const kv = await secrets();
      const key = secretKey(scope.workspaceId, name);
      const entry = await kv.get(key);
      if (!entry || entry.operation !== "PUT") throw new NotFoundError("secret");
      // Purge, not delete: no revision of the value is kept behind a marker.
      await kv.purge(key);
      noContent(res);
    }),
  ];
}
