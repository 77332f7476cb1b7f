/**
 * Environment CRUD of the fake gateway: records in memory, input already
 * parsed by the contract's schemas (so a CLI that sends a bad body fails its
 * test), PATCH by the contract's own pointer semantics (applyEnvironmentPatch).
 */
import type { ServerResponse } from "node:http";
import { applyEnvironmentPatch, type BodyOf, type Environment, type HttpApi, type HttpRouteName, type QueryOf } from "@paddock/contracts";
import { FIXTURE_NOW as AT, makeEnvironment } from "@paddock/testing";
import { fail, send, type FakeCall } from "./fake-http.ts";

export type FakeEnvironments = Map<string, Environment>;

const ROUTES: ReadonlySet<HttpRouteName> = new Set(["createEnvironment", "listEnvironments", "getEnvironment", "updateEnvironment", "deleteEnvironment"]);
export const isEnvironmentRoute = (name: HttpRouteName): boolean => ROUTES.has(name);

export function handleEnvironments(gw: { readonly environments: FakeEnvironments; pageSize: number }, call: FakeCall, res: ServerResponse): void {
  const envs = gw.environments;
  if (call.name === "createEnvironment") {
    const body = call.body as BodyOf<typeof HttpApi.createEnvironment>;
    const id = `env${String(envs.size + 1)}`;
    const env = applyEnvironmentPatch(makeEnvironment({ id, name: body.name, lastFact: { eventId: `ev-${id}`, action: "create", actorId: "dev", at: AT } }), body);
    envs.set(id, env);
    return send(res, 201, env);
  }
  if (call.name === "listEnvironments") {
    const q = call.query as QueryOf<typeof HttpApi.listEnvironments>;
    const all = [...envs.values()];
    const from = Number(q.cursor ?? "0");
    const limit = Math.min(gw.pageSize, q.limit);
    const next = from + limit < all.length ? String(from + limit) : undefined;
    return send(res, 200, { environments: all.slice(from, from + limit), nextCursor: next });
  }
  const env = envs.get((call.params as { id: string }).id);
  if (!env) return fail(res, 404, { code: "not_found", message: "environment not found" });
  if (call.name === "getEnvironment") return send(res, 200, env);
  if (call.name === "updateEnvironment") {
    const next = applyEnvironmentPatch({ ...env, updatedAt: env.updatedAt + 1 }, call.body as BodyOf<typeof HttpApi.updateEnvironment>);
    envs.set(env.id, next);
    return send(res, 200, next);
  }
  if (env.name === "in-use") return fail(res, 409, { code: "conflict", message: "a live session uses this environment" });
  envs.delete(env.id);
  send(res, 200, env);
}
