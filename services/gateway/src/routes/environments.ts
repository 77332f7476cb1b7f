import { Api, HttpApi } from "@paddock/contracts";
import { Action } from "../auth/auth.ts";
import { environmentResource, workspaceResource, type GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";

/**
 * Environment CRUD. Members create, get and list; only admins update and
 * delete (an environment has no creator), and only admins create one that
 * references secrets. Another workspace's environment is
 * not_found: the scheduler's keys embed the workspace.
 */
export function environmentRoutes(ctx: GatewayContext): Route[] {
  return [
    ctx.serve(HttpApi.createEnvironment, async ({ caller: { scope }, body }) => {
      await ctx.authorizer.authorize(scope, Action.createEnvironment, workspaceResource(scope));
      const create = await body();
      if (create.secretRefs !== undefined && create.secretRefs.length > 0) await ctx.authorizer.authorize(scope, Action.grantSecrets, workspaceResource(scope));
      const { environment } = await ctx.call(Api.createEnvironment, { scope, body: create });
      return { status: 201, body: environment };
    }),

    ctx.serve(HttpApi.listEnvironments, async ({ caller: { scope }, query: q }) => {
      await ctx.authorizer.authorize(scope, Action.listEnvironments, workspaceResource(scope));
      const page = await ctx.call(Api.listEnvironments, {
        scope,
        limit: q.limit,
        ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
      });
      // Defence in depth, as for sessions: never show another workspace's record.
      const environments = page.environments.filter((e) => e.workspaceId === scope.workspaceId);
      return { status: 200, body: { environments, ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) } };
    }),

    ctx.serve(HttpApi.getEnvironment, async ({ caller: { scope }, params }) => {
      const environment = await ctx.getEnvironment(scope, params.id);
      await ctx.authorizer.authorize(scope, Action.getEnvironment, environmentResource(environment));
      return { status: 200, body: environment };
    }),

    ctx.serve(HttpApi.updateEnvironment, async ({ caller: { scope }, params, body }) => {
      const patch = await body();
      const current = await ctx.getEnvironment(scope, params.id);
      await ctx.authorizer.authorize(scope, Action.updateEnvironment, environmentResource(current));
      const { environment } = await ctx.call(Api.updateEnvironment, { scope, environmentId: current.id, body: patch });
      return { status: 200, body: environment };
    }),

    ctx.serve(HttpApi.deleteEnvironment, async ({ caller: { scope }, params }) => {
      const current = await ctx.getEnvironment(scope, params.id);
      await ctx.authorizer.authorize(scope, Action.deleteEnvironment, environmentResource(current));
      const { environment } = await ctx.call(Api.deleteEnvironment, { scope, environmentId: current.id });
      return { status: 200, body: environment };
    }),
  ];
}
