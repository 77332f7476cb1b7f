import { describe, expect, it } from "vitest";
import { RunnerState, RunnerStateSchema, SettableRunnerState } from "../fleet.ts";
import { AuditAction } from "../audit.ts";
import { TransferDirection, WorkspaceOps } from "../workspace.ts";
import { fillPath, parseHttpInput, pathParamNames, pathPattern, routeName } from "./route.ts";
import { findHttpRoute, HttpApi } from "./routes.ts";

describe("HTTP contract helpers", () => {
  it("paths: parameters named, filled URI-encoded, matched back", () => {
    const path = HttpApi.restartApp.path;
    expect(pathParamNames(path)).toEqual(["id", "app"]);
    const filled = fillPath(path, { id: "s 1", app: "web" });
    expect(filled).toBe("/v1/sessions/s%201/apps/web/restart");
    expect(pathPattern(path).exec(filled)?.slice(1)).toEqual(["s%201", "web"]);
    // A final *rest keeps its slashes (the port proxy of the second wave).
    expect(fillPath("/v1/sessions/:id/ports/:port/*rest", { id: "s1", port: 3000, rest: "a/b c" })).toBe("/v1/sessions/s1/ports/3000/a/b%20c");
    expect(pathPattern("/v1/x/*rest").exec("/v1/x/a/b")?.[1]).toBe("a/b");
    expect(() => fillPath(path, { id: "s1" })).toThrow(/missing path parameter app/);
  });

  it("every route has a unique method and path", () => {
    const names = Object.values(HttpApi).map(routeName);
    expect(new Set(names).size).toBe(names.length);
  });

  it("findHttpRoute matches a request to its route; parseHttpInput refuses what the route's schemas refuse", () => {
    const found = findHttpRoute("GET", "/v1/events");
    expect(found?.name).toBe("listEvents");
    expect(findHttpRoute("PATCH", "/v1/events")).toBeUndefined();
    const route = HttpApi.listEvents;
    expect(parseHttpInput(route, { params: {}, query: new URLSearchParams("follow=true&limit=5") })).toEqual({ ok: false, message: "query: limit: does not apply with follow=true" });
    expect(parseHttpInput(route, { params: {}, query: new URLSearchParams("follow=true") })).toMatchObject({ ok: true, query: { follow: true, since: 0, limit: 50 } });
    expect(parseHttpInput(route, { params: {}, query: new URLSearchParams("limit=9999") })).toMatchObject({ ok: true, query: { limit: 500 } });
    expect(parseHttpInput(route, { params: {}, query: new URLSearchParams("zz=1") })).toMatchObject({ ok: false });
    expect(parseHttpInput(route, { params: {}, query: new URLSearchParams("since=1&since=2") })).toEqual({ ok: false, message: "query: since given more than once" });
    expect(findHttpRoute("GET", "/v1/sessions/%ZZ")).toMatchObject({ name: "getSession", params: { id: "%ZZ" } });
    const suspend = HttpApi.suspendSession;
    expect(parseHttpInput(suspend, { params: { id: "s1" }, query: new URLSearchParams(), bodyText: "" })).toEqual({ ok: false, message: "body is not valid JSON" });
    expect(parseHttpInput(HttpApi.resumeSession, { params: { id: "s1" }, query: new URLSearchParams(), bodyText: "" })).toMatchObject({ ok: true, body: {} });
    expect(parseHttpInput(suspend, { params: { id: "bad id" }, query: new URLSearchParams(), bodyText: "{}" })).toMatchObject({ ok: false, message: expect.stringMatching(/^path: id:/) });
  });

  it("enum schemas are built from their `as const` objects: no twin list", () => {
    expect(RunnerStateSchema.options.sort()).toEqual(Object.values(RunnerState).sort());
    expect(SettableRunnerState.options.sort()).toEqual(["active", "cordoned", "draining"]);
    // Each workspace fact a record counts is an audit action of its own.
    expect(TransferDirection.options.filter((d) => !(d in AuditAction))).toEqual([]);
    expect(WorkspaceOps).toEqual(expect.arrayContaining(["push", "pull"]));
  });
});
