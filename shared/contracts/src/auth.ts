import { z } from "zod";
import { EpochMs, Id } from "./ids.ts";

export const ActorKind = z.enum(["user", "service"]);
export type ActorKind = z.infer<typeof ActorKind>;

/** An authenticated principal: identity only, never a cached decision. */
export const Actor = z.object({ id: Id, kind: ActorKind }).strict();
export type Actor = z.infer<typeof Actor>;

export const WorkspaceRole = z.enum(["member", "admin"]);

/**
 * The reserved workspace of the fleet. Runner audit events are filed under
 * it, and an admin of it is a fleet operator (drain, cordon, uncordon),
 * whichever workspace the operator's token is for. No session lives in it.
 */
export const FLEET_WORKSPACE = "fleet";
export type WorkspaceRole = z.infer<typeof WorkspaceRole>;

/** The caller of an operation: who, in which workspace, and for a session's own token, which session. */
export const Scope = z
  .object({
    workspaceId: Id,
    actor: Actor,
    /** Set when the caller is a session's service principal; its creates become children. */
    sessionId: Id.optional(),
  })
  .strict();
export type Scope = z.infer<typeof Scope>;

/** A token record in KV `tokens` under the hex sha256 of the token; the token itself is never stored. */
export const TokenRecord = z
  .object({
    /** Set for tokens minted by POST /v1/tokens: listed and revoked by this id. */
    id: Id.optional(),
    workspaceId: Id,
    actor: Actor,
    /** For a session's service token: the session it acts for. */
    sessionId: Id.optional(),
    /** Label shown in listings; never the token. */
    label: z.string().max(128).optional(),
    createdAt: EpochMs,
    /** Expiry in ms since the epoch; absent for a token that does not expire. */
    expiresAt: EpochMs.optional(),
  })
  .strict();
export type TokenRecord = z.infer<typeof TokenRecord>;

/** A membership in KV `members` under `<workspace>.<actor>`; policy reads it on every decision. */
export const Membership = z.object({ workspaceId: Id, actorId: Id, role: WorkspaceRole }).strict();
export type Membership = z.infer<typeof Membership>;

