import { canTransition, occupiesSlot, runnerKey, sessionKey, type RunnerFact, type Session } from "@paddock/contracts";
import { transition, writeSession, type SchedulerContext } from "./context.ts";
import { releaseSlot } from "./slots.ts";
import { CasConflictError } from "./store.ts";

type Outcome = "applied" | "stale" | "illegal" | "duplicate";

/** What a fact asks of the record, or undefined when it changes nothing. */
function nextFor(ctx: SchedulerContext, s: Session, fact: RunnerFact): Session | "illegal" | undefined {
  const actor = fact.runnerId;
  switch (fact.type) {
    case "running":
      if (s.state === "running") return undefined;
      if (!canTransition(s.state, "running") || s.state !== "creating") return "illegal";
      return transition(ctx, s, "running", "start", actor);
    case "exited": {
      if (!canTransition(s.state, "dead")) return s.state === "dead" ? undefined : "illegal";
      const error = fact.signal ? `process killed by ${fact.signal}` : undefined;
      return transition(ctx, s, "dead", "exit", actor, { childExitCode: fact.exitCode, ...(error ? { error } : {}) });
    }
    case "failed":
      if (!canTransition(s.state, "failed")) return s.state === "failed" ? undefined : "illegal";
      return transition(ctx, s, "failed", "fail", actor, { error: fact.reason });
    case "destroyed":
      // Teardown confirmed; the record already left the slot when it was deleted.
      return undefined;
  }
}

/**
 * Applies one runner fact through the fence: the record must still place the
 * session on this runner at this placement generation, and the runner must
 * still hold this registration generation. Anything else is stale: dropped
 * and counted, never applied — including a dead or failed report from a
 * superseded runner.
 */
export async function applyRunnerFact(ctx: SchedulerContext, fact: RunnerFact): Promise<Outcome> {
  for (;;) {
    const current = await ctx.sessions.get(sessionKey(fact.workspaceId, fact.sessionId));
    const runner = await ctx.runners.get(runnerKey(fact.poolId, fact.runnerId));
    const s = current?.value;
    if (
      !current ||
      !s ||
      !runner ||
      s.runnerId !== fact.runnerId ||
      s.poolId !== fact.poolId ||
      s.placementGeneration !== fact.placementGeneration ||
      runner.value.generation !== fact.runnerGeneration
    ) {
      ctx.metrics.staleFacts.inc({ type: fact.type });
      return "stale";
    }
    const next = nextFor(ctx, s, fact);
    if (next === undefined) return "duplicate";
    if (next === "illegal") {
      ctx.metrics.illegalFacts.inc({ type: fact.type });
      return "illegal";
    }
    try {
      await writeSession(ctx, next, current.revision);
    } catch (err) {
      if (err instanceof CasConflictError) continue;
      throw err;
    }
    if (occupiesSlot(s.state) && !occupiesSlot(next.state)) {
      await releaseSlot(ctx, s.poolId, s.runnerId);
      ctx.requestPlacement();
    }
    return "applied";
  }
}
