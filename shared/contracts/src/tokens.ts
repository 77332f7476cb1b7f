import { z } from "zod";
import { Actor } from "./auth.ts";
import { AttachMode } from "./terminal.ts";
import { EpochMs, Id } from "./ids.ts";

/** Longest lifetime a token may be created with (POST /v1/tokens `expiresInMs`). */
export const MAX_TOKEN_LIFETIME_MS = 366 * 24 * 60 * 60 * 1000;
/** Lifetime of an attach ticket: long enough to open a WebSocket, no more. */
export const ATTACH_TICKET_TTL_MS = 30_000;
/** Prefix of an API token minted by POST /v1/tokens, and of an attach ticket. */
export const TOKEN_PREFIX = "pdk_";
export const TICKET_PREFIX = "pdt_";
/** A minted token's value: the prefix and 32 random bytes, base64url. */
export const TokenValue = z.string().regex(new RegExp(`^${TOKEN_PREFIX}[A-Za-z0-9_-]{43}$`), "not a minted token");
/** An attach ticket's value: the prefix and 32 random bytes, base64url. */
export const TicketValue = z.string().regex(new RegExp(`^${TICKET_PREFIX}[A-Za-z0-9_-]{43}$`), "not an attach ticket");

/** Body of POST /v1/tokens. Without expiresInMs the token does not expire. */
export const CreateTokenBody = z
  .object({
    label: z.string().min(1).max(128).optional(),
    expiresInMs: z.number().int().min(1000).max(MAX_TOKEN_LIFETIME_MS).optional(),
  })
  .strict();
export type CreateTokenBody = z.infer<typeof CreateTokenBody>;

/** A token as listed: never its value, never its hash. */
export const TokenInfo = z
  .object({
    id: Id,
    workspaceId: Id,
    actor: Actor,
    label: z.string().max(128).optional(),
    createdAt: EpochMs,
    expiresAt: EpochMs.optional(),
  })
  .strict();
export type TokenInfo = z.infer<typeof TokenInfo>;

/** Answer of POST /v1/tokens (201): the only time the token value is shown. */
export const CreatedToken = TokenInfo.extend({ token: TokenValue }).strict();
export type CreatedToken = z.infer<typeof CreatedToken>;

/** Answer of GET /v1/tokens: the caller's own tokens. */
export const TokenList = z.object({ tokens: z.array(TokenInfo) }).strict();
export type TokenList = z.infer<typeof TokenList>;

/** Body of POST /v1/sessions/:id/attach-ticket. */
export const AttachTicketBody = z.object({ mode: AttachMode.default("viewer") }).strict();
export type AttachTicketBody = z.infer<typeof AttachTicketBody>;

/** Answer of POST /v1/sessions/:id/attach-ticket: pass `?ticket=` to the terminal WebSocket within 30 s, once. */
export const AttachTicket = z.object({ ticket: TicketValue, expiresAt: EpochMs }).strict();
export type AttachTicket = z.infer<typeof AttachTicket>;

/**
 * An attach ticket in KV `tokens` under `ticket.<sha256>`: bound to the session,
 * the mode, and the token (hash) that asked for it. Deleted by its one use.
 */
export const AttachTicketRecord = z
  .object({
    workspaceId: Id,
    sessionId: Id,
    mode: AttachMode,
    actorId: Id,
    tokenHash: z.string().regex(/^[0-9a-f]{64}$/),
    expiresAt: EpochMs,
  })
  .strict();
export type AttachTicketRecord = z.infer<typeof AttachTicketRecord>;

/**
 * The listing index of a token in KV `tokens` under `id.<workspace>.<actor>.<token id>`,
 * with what a listing shows of it (`info`, absent on entries older than it):
 * written before the record, so a watcher of the index has it without the record.
 */
export const TokenIndexEntry = z.object({ hash: z.string().regex(/^[0-9a-f]{64}$/), info: TokenInfo.optional() }).strict();
export type TokenIndexEntry = z.infer<typeof TokenIndexEntry>;
