import { z } from "zod";
import { Id, EpochMs } from "./ids.ts";
import { WorkspaceRole } from "./auth.ts";

/** The body of `POST /v1/workspaces`. */
export const CreateWorkspaceBody = z.object({ id: Id, name: z.string().min(1).max(128).optional() }).strict();
export type CreateWorkspaceBody = z.infer<typeof CreateWorkspaceBody>;

/** A workspace's record in KV `workspaces` (under its id), and the answer of its creation. */
export const WorkspaceRecord = z.object({ id: Id, name: z.string().max(128).optional(), createdAt: EpochMs, createdBy: Id }).strict();
export type WorkspaceRecord = z.infer<typeof WorkspaceRecord>;

/** A member as the API shows it. */
export const Member = z.object({ workspaceId: Id, actorId: Id, role: WorkspaceRole }).strict();
export type Member = z.infer<typeof Member>;

export const MemberList = z.object({ members: z.array(Member) }).strict();
export type MemberList = z.infer<typeof MemberList>;

/** The body of `PUT /v1/workspaces/:ws/members/:actorId`. */
export const PutMemberBody = z.object({ role: WorkspaceRole }).strict();
export type PutMemberBody = z.infer<typeof PutMemberBody>;
