import type { KV } from "@nats-io/kv";
import { decodeJson, encodeJson, isWrongLastSequence } from "@paddock/bus";
import { Buckets, ConflictError, ForbiddenError, HttpApi, Membership, NotFoundError, WorkspaceRecord, type Member, type Scope, type WorkspaceRole } from "@paddock/contracts";
import { Action, lazyKv, memberKey } from "./auth.ts";
import { mintToken } from "./tokens.ts";
import { workspaceResource, type GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";

/**
 * Workspaces and members through the API (issue 28 item 7). A workspace's
 * admins manage it with a token of that workspace; a fleet operator (an
 * admin of workspace `fleet`) manages any, and alone creates workspaces.
 * Memberships live in KV `members` (what every authorization reads, so a
 * change takes effect on the next call, and the stream guard cuts open
 * streams of a removed member at once); workspaces made here in KV
 * `workspaces` (a workspace also exists by having members).
 */
export function memberRoutes(ctx: GatewayContext): Route[] {
  const members = lazyKv(ctx.deps.nc, Buckets.members);
  const workspaces = lazyKv(ctx.deps.nc, Buckets.workspaces);

  const membersOf = async (kv: KV, workspaceId: string): Promise<Member[]> => {
    const out: Member[] = [];
    const prefix = `${workspaceId}.`;
    for await (const key of await kv.keys(`${prefix}*`)) {
      const entry = key.startsWith(prefix) ? await kv.get(key) : null;
      const decoded = entry?.operation === "PUT" ? decodeJson(Membership, entry.value) : undefined;
      if (decoded?.ok && decoded.value.workspaceId === workspaceId) out.push(decoded.value);
    }
    return out.sort((a, b) => (a.actorId < b.actorId ? -1 : a.actorId > b.actorId ? 1 : 0));
  };

  const exists = async (workspaceId: string): Promise<boolean> => {
    const record = await (await workspaces()).get(workspaceId);
    return record?.operation === "PUT" || (await membersOf(await members(), workspaceId)).length > 0;
  };

  /**
   * The caller may manage ws: an admin of it with a token of it, or a fleet
   * operator. Anyone else asking about another workspace gets the not_found
   * of one that does not exist (no existence oracle).
   */
  const manage = async (scope: Scope, ws: string): Promise<void> => {
    if (ws === scope.workspaceId) return ctx.authorizer.authorize(scope, Action.manageMembers, workspaceResource(scope));
    try {
      await ctx.authorizer.authorize(scope, Action.createWorkspace, workspaceResource(scope));
    } catch (err) {
      if (err instanceof ForbiddenError) throw new NotFoundError("workspace", { cause: err });
      throw err;
    }
    if (!(await exists(ws))) throw new NotFoundError("workspace");
  };

  /** Refuses a change that would leave the workspace without an admin. */
  const keepAnAdmin = (current: readonly Member[], actorId: string, next: WorkspaceRole | undefined) => {
    const admins = current.filter((m) => m.role === "admin" && m.actorId !== actorId).length;
    const was = current.find((m) => m.actorId === actorId)?.role;
    if (was === "admin" && next !== "admin" && admins === 0) throw new ConflictError("the workspace's last admin cannot be demoted or removed: make another admin first");
  };

  return [
    ctx.serve(HttpApi.createWorkspace, async ({ caller: { scope }, body: readBody }) => {
      const body = await readBody();
      await ctx.authorizer.authorize(scope, Action.createWorkspace, workspaceResource(scope));
      if (await exists(body.id)) throw new ConflictError(`workspace ${body.id} exists`);
      const record: WorkspaceRecord = { id: body.id, ...(body.name !== undefined ? { name: body.name } : {}), createdAt: ctx.deps.now(), createdBy: scope.actor.id };
      try {
        await (await workspaces()).create(body.id, encodeJson(WorkspaceRecord, record));
      } catch (err) {
        if (isWrongLastSequence(err)) throw new ConflictError(`workspace ${body.id} exists`, { cause: err });
        throw err;
      }
      return { status: 201, body: record };
    }),

    ctx.serve(HttpApi.listMembers, async ({ caller: { scope }, params }) => {
      await manage(scope, params.ws);
      return { status: 200, body: { members: await membersOf(await members(), params.ws) } };
    }),

    ctx.serve(HttpApi.putMember, async ({ caller: { scope }, params, body: readBody }) => {
      const { role } = await readBody();
      await manage(scope, params.ws);
      const kv = await members();
      keepAnAdmin(await membersOf(kv, params.ws), params.actorId, role);
      const member: Member = { workspaceId: params.ws, actorId: params.actorId, role };
      await kv.put(memberKey(params.ws, params.actorId), encodeJson(Membership, member));
      return { status: 200, body: member };
    }),

    ctx.serve(HttpApi.removeMember, async ({ caller: { scope }, params }) => {
      await manage(scope, params.ws);
      const kv = await members();
      const current = await membersOf(kv, params.ws);
      const member = current.find((m) => m.actorId === params.actorId);
      if (!member) throw new NotFoundError("member");
      keepAnAdmin(current, params.actorId, undefined);
      // Purged: no revision of the membership stays behind a marker; the guard cuts the member's open streams.
      await kv.purge(memberKey(params.ws, params.actorId));
      return { status: 200, body: member };
    }),

    ctx.serve(HttpApi.createMemberToken, async ({ caller: principal, params, body: readBody }) => {
      const body = await readBody();
      await manage(principal.scope, params.ws);
      const member = (await membersOf(await members(), params.ws)).find((m) => m.actorId === params.actorId);
      if (!member) throw new NotFoundError("member");
      const created = await mintToken(ctx, principal, { workspaceId: params.ws, actor: { id: params.actorId, kind: "user" } }, body);
      return { status: 201, body: created };
    }),
  ];
}
