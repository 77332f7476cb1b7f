/**
 * Runner routes of the fake gateway: a fleet in memory, listed by pages,
 * fetched by id and moved between states by drain/cordon/uncordon. Input is
 * parsed by the contract's schemas (state changes take an empty body or `{}`
 * only); a state change needs an admin (`gw.admin`, true by default).
 */
import type { ServerResponse } from "node:http";
import { RunnerState, type HttpApi, type HttpRouteName, type QueryOf, type Runner } from "@paddock/contracts";
import { fail, send, type FakeCall } from "./fake-http.ts";

export type FakeRunners = Map<string, Runner>;

const STATES: Partial<Record<HttpRouteName, Runner["state"]>> = {
  drainRunner: RunnerState.draining,
  cordonRunner: RunnerState.cordoned,
  uncordonRunner: RunnerState.active,
};

export const isRunnerRoute = (name: HttpRouteName): boolean => name === "listRunners" || name === "getRunner" || name in STATES;

export function handleRunners(gw: { readonly runners: FakeRunners; pageSize: number; admin: boolean }, call: FakeCall, res: ServerResponse): void {
  if (call.name === "listRunners") {
    const q = call.query as QueryOf<typeof HttpApi.listRunners>;
    const all = [...gw.runners.values()];
    const from = Number(q.cursor ?? "0");
    const limit = Math.min(gw.pageSize, q.limit);
    const next = from + limit < all.length ? String(from + limit) : undefined;
    return send(res, 200, { runners: all.slice(from, from + limit), nextCursor: next });
  }
  const { id } = call.params as { id: string };
  const state = STATES[call.name];
  if (state !== undefined && !gw.admin) return fail(res, 403, { code: "forbidden", message: "runner.set_state needs a workspace admin" });
  const runner = gw.runners.get(id);
  if (!runner) return fail(res, 404, { code: "not_found", message: "runner not found" });
  if (state === undefined) return send(res, 200, runner);
  const next: Runner = { ...runner, state };
  gw.runners.set(id, next);
  send(res, 200, next);
}

export { makeRunner } from "@paddock/testing";
