import { randomBytes } from "node:crypto";
import type { ServerResponse } from "node:http";
import type { KV, KvWatchEntry } from "@nats-io/kv";
import type { z } from "zod";
import { decodeJson, encodeJson } from "@paddock/bus";
import {
  ATTACH_TICKET_TTL_MS,
  AttachTicketRecord,
  ConflictError,
  HttpApi,
  InvalidError,
  NotFoundError,
  randomId,
  TICKET_PREFIX,
  TicketValue,
  TOKEN_PREFIX,
  TokenIndexEntry,
  TokenRecord,
  UnauthenticatedError,
  type AttachMode,
  type CreatedToken,
  type CreateTokenBody,
  type Scope,
  type TokenFeedLine,
  type TokenInfo,
} from "@paddock/contracts";
import { Action, hashToken, type Principal } from "./auth.ts";
import type { Reauthorize, StreamGuard } from "./revocation.ts";
import { serveRecordFeed } from "./record-feed.ts";
import { sessionResource, workspaceResource, type GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";

/** Tokens one actor may hold in one workspace (minted by POST /v1/tokens); more is a conflict. */
export const MAX_TOKENS_PER_ACTOR = 100;

/*
 * KV `tokens` layout (one bucket, three key shapes that cannot collide):
 *   <sha256 hex>                      TokenRecord (what authenticate reads)
 *   id.<workspace>.<actor>.<token id> TokenIndexEntry {hash}: listing and revoke by id
 *   ticket.<sha256 hex>               AttachTicketRecord, deleted by its one use
 */
const indexKey = (workspaceId: string, actorId: string, id: string) => `id.${workspaceId}.${actorId}.${id}`;
export const ticketKey = (ticket: string) => `ticket.${hashToken(ticket)}`;

/** A fresh secret: prefix plus 32 random bytes (base64url). */
function secret(prefix: string): string {
  return prefix + randomBytes(32).toString("base64url");
}

function infoOf(record: TokenRecord & { id: string }): TokenInfo {
  return {
    id: record.id,
    workspaceId: record.workspaceId,
    actor: record.actor,
    ...(record.label !== undefined ? { label: record.label } : {}),
    createdAt: record.createdAt,
    ...(record.expiresAt !== undefined ? { expiresAt: record.expiresAt } : {}),
  };
}

async function collectKeys(kv: KV, filter: string): Promise<string[]> {
  const out: string[] = [];
  for await (const k of await kv.keys(filter)) out.push(k);
  return out.sort();
}

/** The caller's own tokens, as listed. */
async function ownTokens(kv: KV, scope: Scope): Promise<TokenInfo[]> {
  const tokens: TokenInfo[] = [];
  for (const key of await collectKeys(kv, indexKey(scope.workspaceId, scope.actor.id, "*"))) {
    const found = await recordOf(kv, key);
    if (found && found.record.workspaceId === scope.workspaceId && found.record.actor.id === scope.actor.id) tokens.push(infoOf(found.record));
  }
  return tokens;
}

/**
 * GET /v1/tokens?follow=true: the caller's own tokens, then each one minted
 * (from its index entry, written before the record) and each one revoked
 * (its index entry purged).
 */
async function followTokens(ctx: GatewayContext, guard: StreamGuard, principal: Principal, reauthorize: Reauthorize, res: ServerResponse): Promise<void> {
  const { scope } = principal;
  const kv = await ctx.tokens();
  const lineOf = async (e: KvWatchEntry): Promise<TokenFeedLine | undefined> => {
    const id = e.key.slice(e.key.lastIndexOf(".") + 1);
    if (e.operation !== "PUT") return { removed: { id } };
    const entry = decodeJson(TokenIndexEntry, e.value);
    if (!entry.ok) return undefined;
    const info = entry.value.info ?? (await recordOf(kv, e.key).then((f) => (f ? infoOf(f.record) : undefined)));
    return info && info.workspaceId === scope.workspaceId && info.actor.id === scope.actor.id ? { token: info } : undefined;
  };
  await serveRecordFeed<TokenFeedLine>({
    res,
    guard,
    principal,
    reauthorize,
    log: ctx.deps.log,
    sources: [{ kv, key: indexKey(scope.workspaceId, scope.actor.id, "*"), lineOf }],
    snapshot: async () => (await ownTokens(kv, scope)).map((token) => ({ token })),
    synced: { synced: true },
  });
}

/** The live record an index key points to; undefined when it was revoked meanwhile. */
async function recordOf(kv: KV, key: string): Promise<{ hash: string; record: TokenRecord & { id: string } } | undefined> {
  const idx = await kv.get(key);
  const entry = idx && idx.operation === "PUT" ? decodeJson(TokenIndexEntry, idx.value) : undefined;
  if (!entry?.ok) return undefined;
  const raw = await kv.get(entry.value.hash);
  const decoded = raw && raw.operation === "PUT" ? decodeJson(TokenRecord, raw.value) : undefined;
  if (!decoded?.ok || decoded.value.id === undefined) return undefined;
  return { hash: entry.value.hash, record: { ...decoded.value, id: decoded.value.id } };
}

/**
 * Mints an API token for `owner` (the caller itself, or a member an admin
 * mints one for): it cannot outlive the minter's own token, an actor holds at
 * most MAX_TOKENS_PER_ACTOR in a workspace, and minting counts against the
 * minter's create rate. The value is answered once and never stored.
 */
export async function mintToken(ctx: GatewayContext, minter: Principal, owner: Pick<TokenRecord, "workspaceId" | "actor">, body: CreateTokenBody): Promise<CreatedToken> {
  const at = ctx.deps.now();
  const expiresAt = body.expiresInMs !== undefined ? at + body.expiresInMs : undefined;
  // A token cannot outlive the one that minted it (no lifetime escalation).
  if (minter.expiresAt !== undefined && (expiresAt === undefined || expiresAt > minter.expiresAt)) {
    throw new InvalidError("body: expiresInMs: a token cannot outlive the token that creates it");
  }
  const kv = await ctx.tokens();
  if ((await collectKeys(kv, indexKey(owner.workspaceId, owner.actor.id, "*"))).length >= MAX_TOKENS_PER_ACTOR) {
    throw new ConflictError(`at most ${MAX_TOKENS_PER_ACTOR} tokens per actor: revoke one first`);
  }
  ctx.creates.check(minter.tokenHash, "token creates");
  const token = secret(TOKEN_PREFIX);
  const hash = hashToken(token);
  const record: TokenRecord & { id: string } = {
    id: randomId("tok"),
    workspaceId: owner.workspaceId,
    actor: owner.actor,
    ...(body.label !== undefined ? { label: body.label } : {}),
    createdAt: at,
    ...(expiresAt !== undefined ? { expiresAt } : {}),
  };
  // Index first: a record is never left without a way to list and revoke it.
  await kv.create(indexKey(owner.workspaceId, owner.actor.id, record.id), encodeJson(TokenIndexEntry, { hash, info: infoOf(record) }));
  await kv.create(hash, encodeJson(TokenRecord, record));
  return { token, ...infoOf(record) };
}

/**
 * Removes an actor's expired tokens of one label (single sign-on mints one per
 * sign-in: without this, expired ones would count against MAX_TOKENS_PER_ACTOR).
 */
export async function purgeExpiredTokens(ctx: GatewayContext, owner: { workspaceId: string; actorId: string }, label: string): Promise<void> {
  const kv = await ctx.tokens();
  for (const key of await collectKeys(kv, indexKey(owner.workspaceId, owner.actorId, "*"))) {
    const found = await recordOf(kv, key);
    if (!found || found.record.label !== label || found.record.expiresAt === undefined || found.record.expiresAt > ctx.deps.now()) continue;
    await kv.purge(found.hash);
    await kv.purge(key);
  }
}

export function tokenRoutes(ctx: GatewayContext, guard: StreamGuard): Route[] {
  const { now } = ctx.deps;
  return [
    ctx.serve(HttpApi.createToken, async ({ caller: principal, body: readBody }) => {
      const { scope } = principal;
      await ctx.authorizer.authorize(scope, Action.createToken, workspaceResource(scope));
      const body = await readBody();
      return { status: 201, body: await mintToken(ctx, principal, { workspaceId: scope.workspaceId, actor: scope.actor }, body) };
    }),

    ctx.serve(HttpApi.listTokens, async ({ caller: principal, query: q, res }) => {
      const { scope } = principal;
      const reauthorize: Reauthorize = (s) => ctx.authorizer.authorize(s, Action.listTokens, workspaceResource(s));
      await reauthorize(scope);
      if (q.follow) return followTokens(ctx, guard, principal, reauthorize, res);
      return { status: 200, body: { tokens: await ownTokens(await ctx.tokens(), scope) } };
    }),

    ctx.serve(HttpApi.revokeToken, async ({ caller: { scope }, params: { id } }) => {
      const kv = await ctx.tokens();
      // Keys embed the workspace: another workspace's token is simply absent (not_found).
      const [key] = await collectKeys(kv, indexKey(scope.workspaceId, "*", id));
      const found = key === undefined ? undefined : await recordOf(kv, key);
      if (!key || !found || found.record.workspaceId !== scope.workspaceId) throw new NotFoundError("token");
      await ctx.authorizer.authorize(scope, Action.revokeToken, { kind: "token", workspaceId: scope.workspaceId, id, creatorId: found.record.actor.id });
      // Record first: from this write on, the token fails everywhere (open sockets watch this key).
      await kv.purge(found.hash);
      await kv.purge(key);
      return { status: 200, body: infoOf(found.record) };
    }),

    ctx.serve(HttpApi.createAttachTicket, async ({ caller: principal, params, body: readBody }) => {
      const { scope } = principal;
      const body = await readBody();
      const session = await ctx.getSession(scope, params.id);
      await ctx.authorizer.authorize(scope, body.mode === "controller" ? Action.attachController : Action.attachViewer, sessionResource(session));
      const ticket = secret(TICKET_PREFIX);
      const expiresAt = Math.min(now() + ATTACH_TICKET_TTL_MS, principal.expiresAt ?? Number.POSITIVE_INFINITY);
      const record: AttachTicketRecord = {
        workspaceId: scope.workspaceId,
        sessionId: session.id,
        mode: body.mode,
        actorId: scope.actor.id,
        tokenHash: principal.tokenHash,
        expiresAt,
      };
      await (await ctx.tokens()).create(ticketKey(ticket), encodeJson(AttachTicketRecord, record));
      return { status: 201, body: { ticket, expiresAt } };
    }),
  ];
}

/**
 * Spends an attach ticket: the first use deletes it (a CAS on its revision, so
 * two concurrent uses race to one winner), later ones are unauthenticated. Then
 * the token that asked for it is re-read: a revoked or expired one fails here.
 */
export async function consumeTicket(
  ctx: GatewayContext,
  ticket: string,
  sessionId: string,
  mode: AttachMode | undefined,
): Promise<{ principal: Principal; mode: AttachMode }> {
  if (!TicketValue.safeParse(ticket).success) throw new UnauthenticatedError();
  const t = await spendOnce(ctx, ticketKey(ticket), AttachTicketRecord, (t) => {
    // A wrong ?mode is the caller's typo: answered before the ticket is spent, so it can be used right.
    if (mode !== undefined && mode !== t.mode && t.expiresAt > ctx.deps.now() && t.sessionId === sessionId) {
      throw new InvalidError(`query: mode: the ticket is for ${t.mode}`);
    }
  });
  if (t.expiresAt <= ctx.deps.now() || t.sessionId !== sessionId) throw new UnauthenticatedError();
  return { principal: await principalOfGrant(ctx, t), mode: t.mode };
}

/**
 * Reads and deletes a single-use record of KV `tokens` (a ticket): its first
 * use deletes it by a CAS on its revision, so two concurrent uses race to one
 * winner; a missing, malformed or already spent one is unauthenticated, the
 * one answer of every token failure (auth.ts). `beforeSpend` may refuse it
 * without spending it.
 */
export async function spendOnce<S extends z.ZodType>(ctx: GatewayContext, key: string, schema: S, beforeSpend?: (record: z.infer<S>) => void): Promise<z.infer<S>> {
  const kv = await ctx.tokens();
  const entry = await kv.get(key);
  const decoded = entry?.operation === "PUT" ? decodeJson(schema, entry.value) : undefined;
  if (!entry || !decoded?.ok) throw new UnauthenticatedError();
  beforeSpend?.(decoded.value);
  try {
    await kv.purge(key, { previousSeq: entry.revision });
  } catch {
    throw new UnauthenticatedError(); // another use won the race
  }
  return decoded.value;
}

/** The principal a ticket or grant stands for, read now: its token (revoked or expired: unauthenticated), still that actor's in that workspace. */
export async function principalOfGrant(ctx: GatewayContext, grant: { tokenHash: string; actorId: string; workspaceId: string }): Promise<Principal> {
  const principal = await ctx.principalOfHash(grant.tokenHash);
  if (principal.scope.workspaceId !== grant.workspaceId || principal.scope.actor.id !== grant.actorId) throw new UnauthenticatedError();
  return principal;
}
