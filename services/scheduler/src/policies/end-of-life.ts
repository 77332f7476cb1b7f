import { isTerminal, type Session } from "@paddock/contracts";
import { tokenKey } from "@paddock/contracts/token-key";
import type { SchedulerContext } from "../context.ts";
import { SCHEDULER_ACTOR } from "../state/writes.ts";
import { deleteSession } from "../api/queries.ts";
import { dispatchDestroy } from "../fleet/slots.ts";
import { sessionTokenOf } from "../fleet/tokens.ts";

/** First retry of an end of life that failed (a broker failover), doubling up to the cap. */
const RETRY_FIRST_MS = 1_000;
const RETRY_MAX_MS = 30_000;

/**
 * Records that ended this recently are given their end of life again when a
 * replica starts: the replica whose write ended one may have died before
 * finishing it. Everything it does is idempotent.
 */
export const END_OF_LIFE_REPLAY_MS = 15 * 60_000;

/**
 * Revokes every token the session was ever given (one per placement
 * generation). Reads first: deleting a key that is already gone would still
 * write a delete marker, and a replayed end of life would leave one per
 * session and generation.
 */
export async function revokeSessionTokens(ctx: SchedulerContext, s: Session): Promise<void> {
  for (let g = 1; g <= s.placementGeneration; g++) {
    const key = tokenKey(sessionTokenOf(ctx, s, g));
    const entry = await ctx.tokens.get(key);
    if (entry?.operation === "PUT") await ctx.tokens.delete(key);
  }
}

/** Whether any of the session's service tokens is still stored. */
async function tokensLeft(ctx: SchedulerContext, s: Session): Promise<boolean> {
  for (let g = 1; g <= s.placementGeneration; g++) {
    if ((await ctx.tokens.get(tokenKey(sessionTokenOf(ctx, s, g))))?.operation === "PUT") return true;
  }
  return false;
}

/**
 * End of life: revoke the session's service tokens, tear its sandbox down (a
 * dead session keeps its workspace until its record expires), and end its
 * live children.
 */
export async function onSessionTerminal(ctx: SchedulerContext, s: Session): Promise<void> {
  ctx.presence.forget(s.id);
  await revokeSessionTokens(ctx, s);
  if (s.state !== "dead") await dispatchDestroy(ctx, s);
  const children: Session[] = [];
  for (const key of ctx.sessionIndex.childrenOf(s.workspaceId, s.id)) {
    const value = ctx.sessionView.get(key)?.value;
    if (value?.parentId === s.id && value.workspaceId === s.workspaceId && !isTerminal(value.state)) children.push(value);
  }
  const scope = { workspaceId: s.workspaceId, actor: { id: SCHEDULER_ACTOR, kind: "service" as const } };
  for (const child of children) await deleteSession(ctx, scope, child.id);
}

export interface EndOfLife {
  /** Runs a session's end of life, and again after a failure until it succeeds (or the replica stops). */
  run(s: Session): void;
  /**
   * Runs it again, in the background, for every record in the view that ended
   * within END_OF_LIFE_REPLAY_MS and whose end of life never ran; resolves
   * with how many that were.
   */
  replayRecent(): Promise<number>;
  stop(): void;
}

/**
 * The end of life used to be tried once: a token revocation lost to a broker
 * failover (or a replica killed right after the write that ended the
 * session) left the session's token valid for good and its sandbox running.
 */
export function createEndOfLife(ctx: SchedulerContext): EndOfLife {
  const timers = new Set<NodeJS.Timeout>();
  let stopped = false;
  const attempt = (s: Session, delayMs: number): void => {
    onSessionTerminal(ctx, s).catch((err: unknown) => {
      if (stopped) return;
      if (delayMs === RETRY_FIRST_MS) ctx.log.warn({ err, sessionId: s.id }, "end-of-life cleanup failed; retrying");
      const timer = setTimeout(() => {
        timers.delete(timer);
        attempt(s, Math.min(delayMs * 2, RETRY_MAX_MS));
      }, delayMs);
      timer.unref();
      timers.add(timer);
    });
  };
  return {
    run: (s) => attempt(s, RETRY_FIRST_MS),
    replayRecent: () => {
      const since = ctx.now() - END_OF_LIFE_REPLAY_MS;
      const records = [...ctx.sessionView.values()].map((v) => v.value);
      const parents = new Set(records.flatMap((s) => (s.parentId && !isTerminal(s.state) ? [`${s.workspaceId}.${s.parentId}`] : [])));
      const recent = records.filter((s) => isTerminal(s.state) && s.updatedAt >= since);
      // One at a time, in the background: a replica starting after a busy spell may find thousands.
      // The revocation goes first, so a token still there (or a live child) means the end of life never ran.
      return (async () => {
        let redone = 0;
        for (const s of recent) {
          if (stopped) break;
          const unfinished = async () => parents.has(`${s.workspaceId}.${s.id}`) || (await tokensLeft(ctx, s));
          await unfinished()
            .then(async (yes) => {
              if (!yes) return;
              redone += 1;
              await onSessionTerminal(ctx, s);
            })
            .catch(() => attempt(s, RETRY_FIRST_MS));
        }
        return redone;
      })();
    },
    stop: () => {
      stopped = true;
      for (const t of timers) clearTimeout(t);
      timers.clear();
    },
  };
}
