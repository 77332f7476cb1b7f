import { describe, expect, it } from "vitest";
import { fillPath, HealthRoutes, HttpApi, pathParamNames, PublicApi, routeName, type HttpRoute } from "@paddock/contracts";
import { api, expectError, makeEnvironment, makeSession, openTerminal, RUNNER, TOKENS, useHarness, WS1 } from "../testing/testkit.ts";

/*
 * The gateway serves exactly the routes of the HTTP contract: the names its
 * router registered equal the contract's, and the running gateway answers
 * every contract route (an unknown path is 404; a contract route, asked
 * without a token, is 401 from the route's own authenticate step).
 */
const h = useHarness();

const contract: readonly HttpRoute[] = [...Object.values(HttpApi), ...Object.values(PublicApi), ...Object.values(HealthRoutes)];
const sample = (r: HttpRoute) => fillPath(r.path, Object.fromEntries(pathParamNames(r.path).map((p) => [p, "x1"])));

describe("the HTTP contract is what the gateway serves", () => {
  it("the router's routes are the contract's, both ways", () => {
    expect([...h.gateway.served].sort()).toEqual(contract.map(routeName).sort());
  });

  it("every /v1 contract route is matched by the running router: 401 without a token, never 404 or 405", async () => {
    for (const r of Object.values(HttpApi) as readonly HttpRoute[]) {
      if (r.responses.some((x) => x.kind === "websocket")) {
        const ws = await openTerminal(h.wsUrl, "x1", "");
        expect(ws.ok ? 101 : ws.status, routeName(r)).toBe(401);
        continue;
      }
      const res = await api(h.url, r.method, sample(r));
      expect(res.status, routeName(r)).toBe(401);
      expect(res.json?.error?.code, routeName(r)).toBe("unauthenticated");
    }
    expectError(await api(h.url, "GET", "/v1/sessions/x1/nonsense"), 404, "not_found");
  });

  it("every route without a token is matched too: single sign-on, off here, is not_found after its input is checked", async () => {
    expect(await api(h.url, "GET", "/v1/auth/oidc")).toMatchObject({ status: 200, json: { enabled: false } });
    for (const r of [PublicApi.oidcLogin, PublicApi.oidcCallback]) expectError(await api(h.url, r.method, r.path), 404, "not_found");
    for (const r of [PublicApi.oidcRedeem, PublicApi.oidcExchange]) expectError(await api(h.url, r.method, r.path, { body: "{}", headers: { "content-type": "application/json" } }), 400, "invalid");
  });

  it("path parameters are parsed by the contract's schemas: a bad one is invalid on every route that has one", async () => {
    for (const r of Object.values(HttpApi) as readonly HttpRoute[]) {
      const names = pathParamNames(r.path);
      if (names.length === 0 || r.responses.some((x) => x.kind === "websocket")) continue;
      const path = fillPath(r.path, Object.fromEntries(names.map((p) => [p, "bad id!"])));
      const res = await api(h.url, r.method, path, { token: TOKENS.admin, headers: { "content-type": "application/json" }, ...(r.method === "GET" || r.method === "DELETE" ? {} : { body: "{}" }) });
      expect(res.status, routeName(r)).toBe(400);
      expect(res.json?.error?.code, routeName(r)).toBe("invalid");
    }
  });

  it("the gateway's JSON answers parse with the contract's response schemas (what the CLI parses them with)", async () => {
    h.scheduler.put(makeSession({ id: "cs1", workspaceId: WS1, creatorId: "alice" }));
    h.scheduler.putEnv(makeEnvironment({ id: "ce1", workspaceId: WS1, name: "contract-env" }));
    const hook = await api(h.url, "POST", "/v1/webhooks", { token: TOKENS.admin, body: JSON.stringify({ url: "https://93.184.215.14/contract" }), headers: { "content-type": "application/json" } });
    const ids: Record<string, string> = { sessions: "cs1", environments: "ce1", runners: RUNNER.id, webhooks: (hook.json as { id: string }).id };
    let checked = 0;
    for (const r of Object.values(HttpApi) as readonly HttpRoute[]) {
      // Answered by the session's runner, which this harness has not (a resolve also needs its ?pid).
      if (r === HttpApi.readDiff || r === HttpApi.listRepos || r === HttpApi.listFiles || r === HttpApi.listProcesses || r === HttpApi.resolveAgent || r === HttpApi.getSessionMetrics) continue;
      const answer = r.responses.find((x) => x.kind === "json");
      // GETs only: they change nothing, and every one answers from what the fake scheduler holds.
      if (r.method !== "GET" || !answer || answer.kind !== "json") continue;
      const names = pathParamNames(r.path);
      if (names.some((n) => n !== "id")) continue;
      const path = names.length ? fillPath(r.path, { id: ids[r.path.split("/")[2] ?? ""] ?? "x" }) : r.path;
      const res = await api(h.url, "GET", path, { token: TOKENS.admin });
      expect(res.status, routeName(r)).toBe(200);
      const parsed = answer.schema.safeParse(res.json);
      expect(parsed.success, `${routeName(r)}: ${parsed.success ? "" : parsed.error.message}`).toBe(true);
      checked += 1;
    }
    expect(checked).toBeGreaterThanOrEqual(8);
    expect((await api(h.url, "DELETE", `/v1/webhooks/${ids.webhooks}`, { token: TOKENS.admin })).status).toBe(200);
  });
});
