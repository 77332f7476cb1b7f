import { z } from "zod";
import {
  ConflictError,
  DEFAULT_PAGE_LIMIT,
  InvalidError,
  isTerminal,
  MAX_PAGE_LIMIT,
  NotFoundError,
  occupiesSlot,
  runnerKey,
  declaredPorts,
  sessionKey,
  type AttachMode,
  type AuditAction,
  type Runner,
  type Scope,
  type PolicyReason,
  type Session,
  visibleTo,
} from "@paddock/contracts";
import type { SchedulerContext } from "../context.ts";
import { transition, withFact, writeSession } from "../state/writes.ts";
import { releaseSlot } from "../fleet/slots.ts";
import { CasConflictError, type Versioned } from "../state/store.ts";

const SessionCursor = z.tuple([z.number().int().nonnegative(), z.string().min(1)]);

function encodeCursor(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString("base64url");
}

function decodeCursor<S extends z.ZodType>(schema: S, cursor: string): z.infer<S> {
  try {
    const parsed = schema.safeParse(JSON.parse(Buffer.from(cursor, "base64url").toString()));
    if (parsed.success) return parsed.data;
  } catch {
    // fall through: any unreadable cursor is the same error
  }
  throw new InvalidError("cursor is not one this API issued");
}


export async function getSession(ctx: SchedulerContext, scope: Scope, sessionId: string): Promise<Versioned<Session>> {
  // The key embeds the caller's workspace: another workspace's session is simply absent.
  const found = await ctx.sessions.get(sessionKey(scope.workspaceId, sessionId));
  if (!found || !visibleTo(scope, found.value)) throw new NotFoundError("session");
  return found;
}

/**
 * One page in stable (createdAt, id) order; the cursor is the last row's sort
 * key. Read from the index in that order (the workspace's list, or one
 * creator's when the caller is a session or asks for a creator), so a page
 * costs its rows and the rows its filters skip, not the workspace's size.
 */
export function listSessions(
  ctx: SchedulerContext,
  q: { scope: Scope; limit: number; cursor?: string | undefined; includeTerminal: boolean; parentId?: string | undefined; creatorId?: string | undefined },
): { sessions: Session[]; nextCursor?: string } {
  const after = q.cursor !== undefined ? decodeCursor(SessionCursor, q.cursor) : undefined;
  const limit = Math.min(q.limit || DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT);
  // A session's token sees only the sessions it created (visibleTo): its creator's list.
  const creatorId = q.scope.sessionId !== undefined ? q.scope.actor.id : q.creatorId;
  if (q.scope.sessionId !== undefined && q.creatorId !== undefined && q.creatorId !== creatorId) return { sessions: [] };
  const rows: Session[] = [];
  const keys = ctx.sessionIndex.order.keys({ workspaceId: q.scope.workspaceId, creatorId, includeTerminal: q.includeTerminal, after });
  for (const key of keys) {
    const s = ctx.sessionView.get(key)?.value;
    if (!s || !visibleTo(q.scope, s) || s.id === q.scope.sessionId) continue;
    if (!q.includeTerminal && isTerminal(s.state)) continue;
    if (q.parentId !== undefined && s.parentId !== q.parentId) continue;
    rows.push(s);
    if (rows.length > limit) break;
  }
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return rows.length > limit && last ? { sessions: page, nextCursor: encodeCursor([last.createdAt, last.id]) } : { sessions: page };
}

export function listRunners(ctx: SchedulerContext, q: { limit: number; cursor?: string | undefined }): { runners: Runner[]; nextCursor?: string } {
  const after = q.cursor !== undefined ? decodeCursor(z.string().min(1), q.cursor) : undefined;
  const rows = [...ctx.runnerView.values()]
    .map((v) => v.value)
    .filter((r) => after === undefined || runnerKey(r.poolId, r.id) > after)
    .sort((a, b) => (runnerKey(a.poolId, a.id) < runnerKey(b.poolId, b.id) ? -1 : 1));
  const page = rows.slice(0, q.limit).map((r) => ctx.leases.withLastSeen(r));
  const last = page[page.length - 1];
  return rows.length > q.limit && last ? { runners: page, nextCursor: encodeCursor(runnerKey(last.poolId, last.id)) } : { runners: page };
}

/** Why a delete ends a session the way it does: before it ran it is canceled, after it is destroyed. */
function deletedState(s: Session): "canceled" | "destroyed" {
  return s.state === "queued" || s.state === "creating" ? "canceled" : "destroyed";
}

/**
 * The revision that ends a live session as a delete does (canceled before it
 * ran, destroyed after), committing `action` (cancel or delete unless told:
 * a recycle commits its own) with the extra fields of `patch`.
 */
export function endedRevision(
  ctx: SchedulerContext,
  s: Session,
  actorId: string,
  opts: { action?: AuditAction; reason?: PolicyReason | undefined; patch?: Partial<Session> } = {},
): Session {
  const to = deletedState(s);
  const ended = transition(ctx, s, to, opts.action ?? (to === "canceled" ? "cancel" : "delete"), actorId, opts.patch);
  return opts.reason === undefined ? ended : { ...ended, stateReason: opts.reason, lastFact: { ...ended.lastFact, reason: opts.reason } };
}

/** Writes an ending revision by CAS (false when another write came first) and frees the slot the session held. */
export async function writeEnded(ctx: SchedulerContext, current: Versioned<Session>, next: Session): Promise<boolean> {
  try {
    await writeSession(ctx, current, next);
  } catch (err) {
    if (err instanceof CasConflictError) return false;
    throw err;
  }
  // The sandbox is torn down by the end-of-life hook (see policies/end-of-life.ts).
  const s = current.value;
  if (occupiesSlot(s.state)) {
    await releaseSlot(ctx, s.poolId, s.runnerId);
    ctx.requestPlacement();
  }
  return true;
}

/** Deletes a session; idempotent (a terminal session is returned as it is). */
export async function deleteSession(ctx: SchedulerContext, scope: Scope, sessionId: string, reason?: PolicyReason): Promise<Session> {
  for (;;) {
    const current = await getSession(ctx, scope, sessionId);
    if (isTerminal(current.value.state)) return current.value;
    const next = endedRevision(ctx, current.value, scope.actor.id, { reason });
    if (await writeEnded(ctx, current, next)) return next;
  }
}

/**
 * Grants an attach. A controller attach advances controllerGeneration by
 * compare-and-set, so it is atomic across gateway replicas and restarts.
 */
export async function attachSession(
  ctx: SchedulerContext,
  scope: Scope,
  sessionId: string,
  mode: AttachMode,
): Promise<Session> {
  for (;;) {
    const current = await getSession(ctx, scope, sessionId);
    if (mode === "viewer") return current.value;
    if (isTerminal(current.value.state)) throw new ConflictError(`session has ended (${current.value.state})`);
    // A controller attach after an earlier one supersedes it (that controller is closed with 4001).
    const next = withFact(ctx, current.value, current.value.controllerGeneration > 0 ? "supersede" : "attach", scope.actor.id);
    next.controllerGeneration = current.value.controllerGeneration + 1;
    try {
      await writeSession(ctx, current, next);
      return next;
    } catch (err) {
      if (!(err instanceof CasConflictError)) throw err;
    }
  }
}


/**
 * The session a preview URL names, read fresh, when it declares the port
 * (docs/ports.md); not_found for an unknown session or an undeclared port
 * alike. Found by id through the view's index: a public port's caller has no
 * workspace to scope it by.
 */
export async function previewTarget(ctx: SchedulerContext, sessionId: string, port: number): Promise<{ session: Session; public: boolean }> {
  const workspaceId = ctx.sessionIndex.workspaceOf(sessionId);
  const found = workspaceId === undefined ? undefined : await ctx.sessions.get(sessionKey(workspaceId, sessionId));
  const declared = found ? declaredPorts(found.value.spec).find((p) => p.port === port) : undefined;
  if (!found || !declared) throw new NotFoundError("port");
  return { session: found.value, public: declared.public };
}
