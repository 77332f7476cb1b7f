import { isTerminal, type Session } from "@paddock/contracts";
import { SCHEDULER_ACTOR, transition, withFact, writeSession, type SchedulerContext } from "./context.ts";
import { CasConflictError, type Versioned } from "./store.ts";

async function cas(ctx: SchedulerContext, current: Versioned<Session>, next: Session): Promise<boolean> {
  try {
    await writeSession(ctx, current, next);
    return true;
  } catch (err) {
    if (err instanceof CasConflictError) return false;
    throw err;
  }
}

/** Reclaimable records of a workspace, in the order they give way: terminal first, then cold-suspended, oldest first. */
function reclaimable(ctx: SchedulerContext, workspaceId: string): Session[] {
  const rows: Session[] = [];
  for (const { value } of ctx.sessionView.values()) {
    if (value.workspaceId === workspaceId && (isTerminal(value.state) || value.state === "suspended_cold")) rows.push(value);
  }
  const rank = (s: Session) => (isTerminal(s.state) ? 0 : 1);
  return rows.sort((a, b) => rank(a) - rank(b) || a.updatedAt - b.updatedAt);
}

/**
 * At the per-workspace record limit, the oldest reclaimable record gives way:
 * a terminal one is deleted, else a cold-suspended one is destroyed. A live
 * session is never evicted; when all are live, the create is refused.
 */
export async function makeRoom(ctx: SchedulerContext, workspaceId: string): Promise<boolean> {
  if (ctx.sessionIndex.countIn(workspaceId) < ctx.config.maxSessionsPerWorkspace) return true;
  for (const victim of reclaimable(ctx, workspaceId)) {
    const key = ctx.sessions.keyOf(victim);
    const current = await ctx.sessions.get(key);
    if (!current) continue;
    const s = current.value;
    if (isTerminal(s.state)) {
      if (await cas(ctx, current, withFact(ctx, s, "evict", SCHEDULER_ACTOR))) {
        await ctx.sessions.remove(key);
        return true;
      }
    } else if (s.state === "suspended_cold") {
      if (await cas(ctx, current, transition(ctx, s, "destroyed", "evict", SCHEDULER_ACTOR))) {
        await ctx.sessions.remove(key);
        return true;
      }
    }
  }
  return false;
}
