import { ConflictError, isTerminal, type Session } from "@paddock/contracts";
import type { SchedulerContext } from "../context.ts";
import { casSession, SCHEDULER_ACTOR, transition, withFact } from "../state/writes.ts";
import { dispatchDestroy } from "../fleet/slots.ts";

/**
 * Records that may give way to a creator's new one, in order: terminal ones
 * first, then that creator's own cold-suspended ones, least recently changed
 * first. `ownOnly`: only the creator's records (the per-user limit). Another
 * user's suspended session is never among them.
 */
function reclaimable(ctx: SchedulerContext, workspaceId: string, creatorId: string, ownOnly: boolean): Session[] {
  const rows: Session[] = [];
  for (const { value } of ctx.sessionView.values()) {
    if (value.workspaceId !== workspaceId) continue;
    const own = value.creatorId === creatorId;
    if (ownOnly && !own) continue;
    if (isTerminal(value.state) || (own && value.state === "suspended_cold")) rows.push(value);
  }
  const rank = (s: Session) => (isTerminal(s.state) ? 0 : 1);
  return rows.sort((a, b) => rank(a) - rank(b) || a.updatedAt - b.updatedAt);
}

/**
 * Makes the first record of `candidates` that is still reclaimable give way:
 * a terminal one is deleted (a dead one's sandbox torn down at once: it kept
 * its workspace only for its record), a cold-suspended one is destroyed.
 */
async function evictOne(ctx: SchedulerContext, candidates: Session[]): Promise<boolean> {
  for (const victim of candidates) {
    const key = ctx.sessions.keyOf(victim);
    const current = await ctx.sessions.get(key);
    if (!current) continue;
    const s = current.value;
    if (isTerminal(s.state)) {
      if (await casSession(ctx, current, withFact(ctx, s, "evict", SCHEDULER_ACTOR))) {
        if (s.state === "dead") await dispatchDestroy(ctx, s);
        await ctx.sessions.remove(key);
        return true;
      }
    } else if (s.state === "suspended_cold" && s.creatorId === victim.creatorId) {
      if (await casSession(ctx, current, transition(ctx, s, "destroyed", "evict", SCHEDULER_ACTOR))) {
        await ctx.sessions.remove(key);
        return true;
      }
    }
  }
  return false;
}

/**
 * Before a create: below both limits nothing happens. At the creator's
 * per-user limit, the creator's oldest reclaimable record gives way; at the
 * workspace limit, the oldest terminal record or the creator's oldest
 * cold-suspended one. A live session, and another user's suspended one, never
 * does: then the create is a conflict naming the limit.
 */
export async function makeRoom(ctx: SchedulerContext, workspaceId: string, creatorId: string): Promise<void> {
  const { maxSessionsPerUser, maxSessionsPerWorkspace } = ctx.config;
  if (ctx.sessionIndex.countOf(workspaceId, creatorId) >= maxSessionsPerUser) {
    if (!(await evictOne(ctx, reclaimable(ctx, workspaceId, creatorId, true)))) {
      throw new ConflictError(
        `${creatorId} is at the limit of ${maxSessionsPerUser} sessions per user in this workspace, none of them ended or suspended: delete one first`,
      );
    }
  }
  if (ctx.sessionIndex.countIn(workspaceId) >= maxSessionsPerWorkspace) {
    if (!(await evictOne(ctx, reclaimable(ctx, workspaceId, creatorId, false)))) {
      throw new ConflictError(
        `the workspace is at its limit of ${maxSessionsPerWorkspace} sessions, none of them ended (or suspended and yours): delete one first`,
      );
    }
  }
}
