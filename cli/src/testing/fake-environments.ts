/**
 * Environment CRUD of the fake gateway: records in memory, bodies validated
 * with the contract schemas (so a CLI that sends a bad body fails its test),
 * PATCH by the contract's own pointer semantics (applyEnvironmentPatch).
 */
import type { ServerResponse } from "node:http";
import { applyEnvironmentPatch, CreateEnvironmentBody, describeZodError, UpdateEnvironmentBody, type Environment } from "@paddock/contracts";
import { FIXTURE_NOW as AT, makeEnvironment } from "@paddock/testing";
import { fail, send } from "./fake-http.ts";

export type FakeEnvironments = Map<string, Environment>;

export function handleEnvironments(
  gw: { readonly environments: FakeEnvironments; pageSize: number },
  method: string,
  parts: readonly string[],
  url: URL,
  body: unknown,
  res: ServerResponse,
): void {
  const envs = gw.environments;
  if (parts.length === 2 && method === "POST") {
    const parsed = CreateEnvironmentBody.safeParse(body);
    if (!parsed.success) return fail(res, 400, { code: "invalid", message: `body: ${describeZodError(parsed.error)}` });
    const id = `env${String(envs.size + 1)}`;
    const env = applyEnvironmentPatch(
      makeEnvironment({ id, name: parsed.data.name, lastFact: { eventId: `ev-${id}`, action: "create", actorId: "dev", at: AT } }),
      parsed.data,
    );
    envs.set(id, env);
    return send(res, 201, env);
  }
  if (parts.length === 2 && method === "GET") {
    const all = [...envs.values()];
    const from = Number(url.searchParams.get("cursor") ?? "0");
    const limit = Math.min(gw.pageSize, Number(url.searchParams.get("limit") ?? "50"));
    const next = from + limit < all.length ? String(from + limit) : undefined;
    return send(res, 200, { environments: all.slice(from, from + limit), nextCursor: next });
  }
  const env = parts.length === 3 ? envs.get(parts[2] ?? "") : undefined;
  if (!env) return fail(res, 404, { code: "not_found", message: "environment not found" });
  if (method === "GET") return send(res, 200, env);
  if (method === "PATCH") {
    const parsed = UpdateEnvironmentBody.safeParse(body);
    if (!parsed.success) return fail(res, 400, { code: "invalid", message: `body: ${describeZodError(parsed.error)}` });
    const next = applyEnvironmentPatch({ ...env, updatedAt: env.updatedAt + 1 }, parsed.data);
    envs.set(env.id, next);
    return send(res, 200, next);
  }
  if (method === "DELETE") {
    if (env.name === "in-use") return fail(res, 409, { code: "conflict", message: "a live session uses this environment" });
    envs.delete(env.id);
    return send(res, 200, env);
  }
  fail(res, 404, { code: "not_found", message: "no such route" });
}
