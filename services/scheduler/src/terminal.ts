import { isTerminal, type Session } from "@paddock/contracts";
import { SCHEDULER_ACTOR, type SchedulerContext } from "./context.ts";
import { deleteSession } from "./queries.ts";
import { dispatchDestroy } from "./slots.ts";
import { revokeSessionTokens } from "./tokens.ts";

/**
 * End of life, run once by the replica whose write made the session terminal:
 * revoke its service tokens, tear its sandbox down (a dead session keeps its
 * workspace until its record expires), and end its live children.
 */
export async function onSessionTerminal(ctx: SchedulerContext, s: Session): Promise<void> {
  ctx.presence.forget(s.id);
  await revokeSessionTokens(ctx, s);
  if (s.state !== "dead") await dispatchDestroy(ctx, s);
  const children: Session[] = [];
  for (const { value } of ctx.sessionView.values()) {
    if (value.parentId === s.id && value.workspaceId === s.workspaceId && !isTerminal(value.state)) children.push(value);
  }
  const scope = { workspaceId: s.workspaceId, actor: { id: SCHEDULER_ACTOR, kind: "service" as const } };
  for (const child of children) await deleteSession(ctx, scope, child.id);
}
