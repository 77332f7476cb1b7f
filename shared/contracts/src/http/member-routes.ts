import { z } from "zod";
import { Id } from "../ids.ts";
import { CreatedToken, CreateTokenBody } from "../tokens.ts";
import { CreateWorkspaceBody, Member, MemberList, PutMemberBody, WorkspaceRecord } from "../members.ts";
import { httpRoute, json, jsonBody } from "./route.ts";

/* Workspaces and their members (issue 28 item 7): admins of a workspace manage it; creating one is for fleet operators. */

const WorkspaceParams = z.object({ ws: Id }).strict();
const MemberParams = z.object({ ws: Id, actorId: Id }).strict();

export const MemberRoutes = {
  createWorkspace: httpRoute({
    method: "POST",
    path: "/v1/workspaces",
    summary: "Create a workspace (fleet operators: admins of workspace `fleet`). It has no member until one is added.",
    body: jsonBody(CreateWorkspaceBody),
    responses: [json(WorkspaceRecord, [201])],
    errors: ["forbidden", "conflict"],
  }),
  listMembers: httpRoute({
    method: "GET",
    path: "/v1/workspaces/:ws/members",
    summary: "The workspace's members and their roles (its admins, or a fleet operator).",
    params: WorkspaceParams,
    responses: [json(MemberList)],
    errors: ["forbidden", "not_found"],
  }),
  putMember: httpRoute({
    method: "PUT",
    path: "/v1/workspaces/:ws/members/:actorId",
    summary: "Add a member or change their role (its admins, or a fleet operator). The last admin cannot be demoted. Takes effect on open streams at once.",
    params: MemberParams,
    body: jsonBody(PutMemberBody),
    responses: [json(Member)],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  removeMember: httpRoute({
    method: "DELETE",
    path: "/v1/workspaces/:ws/members/:actorId",
    summary: "Remove a member (its admins, or a fleet operator): their open streams are cut at once and their tokens stop authorizing. The last admin cannot be removed.",
    params: MemberParams,
    responses: [json(Member)],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  createMemberToken: httpRoute({
    method: "POST",
    path: "/v1/workspaces/:ws/members/:actorId/tokens",
    summary: "Mint an API token for a member (its admins, or a fleet operator); the token is answered this once.",
    params: MemberParams,
    body: jsonBody(CreateTokenBody, { optional: true }),
    responses: [json(CreatedToken, [201])],
    errors: ["forbidden", "not_found", "conflict"],
  }),
} as const;
