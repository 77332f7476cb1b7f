import type { KV } from "@nats-io/kv";
import { SecretBox } from "@paddock/bus";
import { Buckets, HttpApi, NotFoundError, secretKey } from "@paddock/contracts";
import { Action, lazyKv } from "../auth/auth.ts";
import { workspaceResource, type GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";

/**
 * The secret store's public face: PUT stores a value (admins), GET lists
 * names, DELETE removes one. A value is read from the body, sealed and written
 * to KV `secrets`; it is never echoed, logged, put in an error or a record.
 * The runner reads it at boot (services/runner-agent/src/sessions/secrets.ts).
 */
export function secretRoutes(ctx: GatewayContext): Route[] {
  const secrets = lazyKv(ctx.deps.nc, Buckets.secrets);
  const box = new SecretBox(ctx.deps.config.secretsKey);
  const names = async (kv: KV, workspaceId: string): Promise<string[]> => {
    const out: string[] = [];
    const prefix = `${workspaceId}.`;
    for await (const k of await kv.keys(`${prefix}*`)) if (k.startsWith(prefix)) out.push(k.slice(prefix.length));
    return out.sort();
  };

  return [
    ctx.serve(HttpApi.putSecret, async ({ caller: { scope }, params: { name }, body: readBody }) => {
      const body = await readBody();
      await ctx.authorizer.authorize(scope, Action.putSecret, workspaceResource(scope));
      const key = secretKey(scope.workspaceId, name);
      await (await secrets()).put(key, box.seal(key, body.value));
      return { status: 204 };
    }),

    ctx.serve(HttpApi.listSecrets, async ({ caller: { scope } }) => {
      await ctx.authorizer.authorize(scope, Action.listSecrets, workspaceResource(scope));
      const list = await names(await secrets(), scope.workspaceId);
      return { status: 200, body: { secrets: list.map((name) => ({ name })) } };
    }),

    ctx.serve(HttpApi.deleteSecret, async ({ caller: { scope }, params: { name } }) => {
      await ctx.authorizer.authorize(scope, Action.deleteSecret, workspaceResource(scope));
      const kv = await secrets();
      const key = secretKey(scope.workspaceId, name);
      const entry = await kv.get(key);
      if (!entry || entry.operation !== "PUT") throw new NotFoundError("secret");
      // Purge, not delete: no revision of the value is kept behind a marker.
      await kv.purge(key);
      return { status: 204 };
    }),
  ];
}
