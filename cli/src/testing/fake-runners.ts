/**
 * Runner routes of the fake gateway: a fleet in memory, listed by pages,
 * fetched by id and moved between states by drain/cordon/uncordon. State
 * changes take an empty body or `{}` only, like the gateway, and need an
 * admin (`gw.admin`, true by default).
 */
import type { ServerResponse } from "node:http";
import type { Runner } from "@paddock/contracts";
import { fail, send } from "./fake-http.ts";

export type FakeRunners = Map<string, Runner>;

const STATES = { drain: "draining", cordon: "cordoned", uncordon: "active" } as const;

export function handleRunners(
  gw: { readonly runners: FakeRunners; pageSize: number; admin: boolean },
  method: string,
  parts: readonly string[],
  url: URL,
  body: unknown,
  res: ServerResponse,
): void {
  if (parts.length === 2 && method === "GET") {
    const all = [...gw.runners.values()];
    const from = Number(url.searchParams.get("cursor") ?? "0");
    const limit = Math.min(gw.pageSize, Number(url.searchParams.get("limit") ?? "50"));
    const next = from + limit < all.length ? String(from + limit) : undefined;
    return send(res, 200, { runners: all.slice(from, from + limit), nextCursor: next });
  }
  const id = parts[2] ?? "";
  if (parts.length === 3 && method === "GET") {
    const runner = gw.runners.get(id);
    return runner ? send(res, 200, runner) : fail(res, 404, { code: "not_found", message: "runner not found" });
  }
  const verb = parts[3] ?? "";
  if (parts.length === 4 && method === "POST" && Object.hasOwn(STATES, verb)) {
    if (body !== undefined && (typeof body !== "object" || body === null || Array.isArray(body) || Object.keys(body).length)) {
      return fail(res, 400, { code: "invalid", message: "body: expected an empty object" });
    }
    if (!gw.admin) return fail(res, 403, { code: "forbidden", message: "runner.set_state needs a workspace admin" });
    const runner = gw.runners.get(id);
    if (!runner) return fail(res, 404, { code: "not_found", message: "runner not found" });
    const next: Runner = { ...runner, state: STATES[verb as keyof typeof STATES] };
    gw.runners.set(id, next);
    return send(res, 200, next);
  }
  fail(res, 404, { code: "not_found", message: "no such route" });
}

export { makeRunner } from "@paddock/testing";
