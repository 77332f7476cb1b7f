import { z } from "zod";
import { Id } from "./ids.ts";

/**
 * Runners on remote hosts (issue 29 item 4; docs/decisions/0061-runner-join.md):
 * an operator mints a one-time join token for a pool; the runner host spends
 * it once, registering the public half of an nkey it generated and keeps. The
 * gateway's NATS auth callout then admits that nkey, as that runner only,
 * until the identity is revoked.
 */

/** A join token: `pdj_` + 32 random bytes (base64url). Shown once; stored as its sha256. */
export const JOIN_TOKEN_PREFIX = "pdj_";
export const JoinToken = z.string().regex(/^pdj_[A-Za-z0-9_-]{43}$/, "a join token (pdj_...)");

export const DEFAULT_JOIN_TOKEN_TTL_MS = 60 * 60_000;
export const MIN_JOIN_TOKEN_TTL_MS = 60_000;
/** Also the TTL of KV join-tokens: nothing unspent outlives it. */
export const JOIN_TOKEN_MAX_TTL_MS = 7 * 24 * 60 * 60_000;

/** The public key of a user nkey (base32, `U...`, 56 characters); its checksum is checked where it is used. */
export const NkeyUserPublicKey = z.string().regex(/^U[A-Z2-7]{55}$/, "the public key of a user nkey (U..., 56 characters)");

export const CreateJoinTokenBody = z
  .object({
    poolId: Id,
    ttlMs: z.number().int().min(MIN_JOIN_TOKEN_TTL_MS).max(JOIN_TOKEN_MAX_TTL_MS).optional(),
  })
  .strict();
export type CreateJoinTokenBody = z.infer<typeof CreateJoinTokenBody>;

export const CreatedJoinToken = z.object({ token: JoinToken, poolId: Id, expiresAt: z.number().int() }).strict();
export type CreatedJoinToken = z.infer<typeof CreatedJoinToken>;

/** What KV join-tokens holds under a token's sha256. */
export const JoinTokenRecord = z.object({ poolId: Id, expiresAt: z.number().int(), createdBy: Id, createdAt: z.number().int() }).strict();
export type JoinTokenRecord = z.infer<typeof JoinTokenRecord>;

export const JoinRunnerBody = z
  .object({
    joinToken: z.string().min(1).max(128),
    /** The runner's id; one is generated when absent. An id already joined is a conflict. */
    runnerId: Id.optional(),
    publicKey: NkeyUserPublicKey,
  })
  .strict();
export type JoinRunnerBody = z.infer<typeof JoinRunnerBody>;

/** A joined runner, as KV runner-identities holds it under its id. */
export const RunnerIdentity = z
  .object({
    runnerId: Id,
    poolId: Id,
    publicKey: NkeyUserPublicKey,
    joinedAt: z.number().int(),
    revokedAt: z.number().int().optional(),
  })
  .strict();
export type RunnerIdentity = z.infer<typeof RunnerIdentity>;

/** What a runner needs to start: who it is and where NATS is. */
export const JoinedRunner = z
  .object({
    runnerId: Id,
    poolId: Id,
    /** NATS URLs to connect to, as the gateway's operator configured them for runners. */
    natsUrls: z.array(z.string().min(1).max(512)).min(1).max(32),
  })
  .strict();
export type JoinedRunner = z.infer<typeof JoinedRunner>;

/** The answer of a revoke: the identity (now with revokedAt) and how many live connections were closed. */
export const RevokedRunner = z.object({ identity: RunnerIdentity, connectionsClosed: z.number().int().nonnegative() }).strict();
export type RevokedRunner = z.infer<typeof RevokedRunner>;
