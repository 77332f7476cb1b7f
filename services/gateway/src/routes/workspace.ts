/**
 * PUT and GET /v1/sessions/:id/workspace?path=, GET /v1/sessions/:id/diff and
 * /repos, carried out by the runner that holds the session. Archives pass
 * through object store `transfers` in chunks; the gateway deletes each
 * object it made once the transfer is over. Each: authenticate → validate →
 * fetch the session → authorize on the current membership → act.
 */
import { newSealKey } from "@paddock/archive";
import { callRpc } from "@paddock/bus";
import { ARCHIVE_CONTENT_TYPE, HttpApi, transferObjectName, UnavailableError } from "@paddock/contracts";
import { Action } from "../auth/auth.ts";
import { targetOf, workspaceCalls } from "./workspace-calls.ts";
import type { GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";

export function workspaceRoutes(ctx: GatewayContext): Route[] {
  const calls = workspaceCalls(ctx);
  const { rpcOpts, transfers, removeQuietly, streamUnsealed, recordFact } = calls;
  const target = targetOf;

  return [
    ctx.serveSession(HttpApi.pushWorkspace, async ({ caller: { scope }, params, query, req }) => {
      calls.refuseDeclaredTooLarge(req);
      const { session, rpcs } = await calls.authorized(scope, params.id, Action.pushWorkspace, "write", req);
      const reply = await calls.uploaded(req, session, (transfer) => callRpc(ctx.deps.nc, rpcs.push, { ...target(session), path: query.path ?? "", ...transfer }, rpcOpts));
      // The push is a fact: committed on the record (one audit event) before the client is told.
      await recordFact(scope, session.id, "push");
      return { status: 200, body: reply };
    }),

    ctx.serveSession(HttpApi.pullWorkspace, async ({ caller: { scope }, params, query, req, res }) => {
      const path = query.path ?? "";
      const { session, rpcs } = await calls.authorized(scope, params.id, Action.pullWorkspace, "read", req);
      const transferId = ctx.deps.newId();
      const name = transferObjectName(session.workspaceId, session.id, transferId);
      const key = newSealKey();
      try {
        const { size } = await callRpc(ctx.deps.nc, rpcs.pull, { ...target(session), path, transferId, sealKey: key.toString("base64") }, rpcOpts);
        const got = await (await transfers()).get(name);
        if (!got) throw new UnavailableError("the runner's archive is gone; retry");
        await recordFact(scope, session.id, "pull");
        res.writeHead(200, { "content-type": ARCHIVE_CONTENT_TYPE, "content-length": String(size), "cache-control": "no-store" });
        await streamUnsealed(got, key, name, res, session.id);
      } finally {
        await removeQuietly(name);
      }
    }),

    ctx.serveSession(HttpApi.readDiff, async ({ caller: { scope }, params, req }) => {
      const { session, rpcs } = await calls.authorized(scope, params.id, Action.readDiff, "read", req);
      return { status: 200, body: await callRpc(ctx.deps.nc, rpcs.diff, target(session), rpcOpts) };
    }),

    // Branch, head and dirtiness of each repository: read like the diff, by any member.
    ctx.serveSession(HttpApi.listRepos, async ({ caller: { scope }, params, req }) => {
      const { session, rpcs } = await calls.authorized(scope, params.id, Action.readDiff, "read", req);
      return { status: 200, body: await callRpc(ctx.deps.nc, rpcs.repos, target(session), rpcOpts) };
    }),
  ];
}
