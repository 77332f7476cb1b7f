import { z } from "zod";
import { Api, CreateEnvironmentBody, Id, UpdateEnvironmentBody } from "@paddock/contracts";
import { Action } from "../auth/auth.ts";
import { environmentResource, workspaceResource, type GatewayContext } from "../context.ts";
import { NoQuery, parseWith, queryObject, readJsonBody, route, sendJson, type Route } from "../http/http.ts";
import { QueryLimit } from "./sessions.ts";

export const ListEnvironmentsQuery = z.object({ limit: QueryLimit, cursor: z.string().min(1).max(512).optional() }).strict();

/**
 * Environment CRUD. Members create, get and list; only admins update and
 * delete (an environment has no creator), and only admins create one that
 * references secrets. Another workspace's environment is
 * not_found: the scheduler's keys embed the workspace.
 */
export function environmentRoutes(ctx: GatewayContext): Route[] {
  const { config } = ctx.deps;
  return [
    route("POST", "/v1/environments", async ({ req, res, query }) => {
      const scope = await ctx.authenticate(req);
      parseWith(NoQuery, queryObject(query), "query");
      await ctx.authorizer.authorize(scope, Action.createEnvironment, workspaceResource(scope));
      const body = parseWith(CreateEnvironmentBody, await readJsonBody(req, config.maxBodyBytes), "body");
      if (body.secretRefs !== undefined && body.secretRefs.length > 0) await ctx.authorizer.authorize(scope, Action.grantSecrets, workspaceResource(scope));
      const { environment } = await ctx.call(Api.createEnvironment, { scope, body });
      sendJson(res, 201, environment);
    }),

    route("GET", "/v1/environments", async ({ req, res, query }) => {
      const scope = await ctx.authenticate(req);
      const q = parseWith(ListEnvironmentsQuery, queryObject(query), "query");
      await ctx.authorizer.authorize(scope, Action.listEnvironments, workspaceResource(scope));
      const page = await ctx.call(Api.listEnvironments, {
        scope,
        limit: q.limit,
        ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
      });
      // Defence in depth, as for sessions: never show another workspace's record.
      const environments = page.environments.filter((e) => e.workspaceId === scope.workspaceId);
      sendJson(res, 200, { environments, ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) });
    }),

    route("GET", "/v1/environments/:id", async ({ req, res, params, query }) => {
      const scope = await ctx.authenticate(req);
      parseWith(NoQuery, queryObject(query), "query");
      const environment = await ctx.getEnvironment(scope, params.id);
      await ctx.authorizer.authorize(scope, Action.getEnvironment, environmentResource(environment));
      sendJson(res, 200, environment);
    }),

    route("PATCH", "/v1/environments/:id", async ({ req, res, params, query }) => {
      const scope = await ctx.authenticate(req);
      parseWith(NoQuery, queryObject(query), "query");
      const environmentId = parseWith(Id, params.id, "environment id");
      const body = parseWith(UpdateEnvironmentBody, await readJsonBody(req, config.maxBodyBytes), "body");
      const current = await ctx.getEnvironment(scope, environmentId);
      await ctx.authorizer.authorize(scope, Action.updateEnvironment, environmentResource(current));
      const { environment } = await ctx.call(Api.updateEnvironment, { scope, environmentId: current.id, body });
      sendJson(res, 200, environment);
    }),

    route("DELETE", "/v1/environments/:id", async ({ req, res, params, query }) => {
      const scope = await ctx.authenticate(req);
      parseWith(NoQuery, queryObject(query), "query");
      const current = await ctx.getEnvironment(scope, params.id);
      await ctx.authorizer.authorize(scope, Action.deleteEnvironment, environmentResource(current));
      const { environment } = await ctx.call(Api.deleteEnvironment, { scope, environmentId: current.id });
      sendJson(res, 200, environment);
    }),
  ];
}
