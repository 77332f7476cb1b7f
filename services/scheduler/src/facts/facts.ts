import { canTransition, occupiesSlot, parseRunnerEventsSubject, runnerKey, sessionKey, type RunnerFact, type Session, type Usage } from "@paddock/contracts";
import type { SchedulerContext } from "../context.ts";
import { transition, withFact, writeSession } from "../state/writes.ts";
import { releaseSlot } from "../fleet/slots.ts";
import { CasConflictError } from "../state/store.ts";

type Outcome = "applied" | "stale" | "illegal" | "duplicate" | "foreign";

function withoutPending(s: Session): Session {
  const { pending: _pending, ...rest } = s;
  return rest;
}

/**
 * Puts a generation's usage on the fact that ends it, once: a repeated report
 * (redelivery, or exit and teardown both reporting) is not counted again.
 */
function withUsage(next: Session, prev: Session, fact: { usage?: Usage | undefined; placementGeneration: number }): Session {
  if (!fact.usage || (prev.usageGeneration ?? 0) >= fact.placementGeneration) return next;
  return { ...next, usageGeneration: fact.placementGeneration, lastFact: { ...next.lastFact, usage: fact.usage } };
}

/** A teardown report after the record already ended: only its usage is new. */
function onDestroyed(ctx: SchedulerContext, s: Session, fact: Extract<RunnerFact, { type: "destroyed" }>): Session | undefined {
  if (!fact.usage || (s.usageGeneration ?? 0) >= fact.placementGeneration) return undefined;
  return withUsage(withFact(ctx, s, "usage", fact.runnerId), s, fact);
}

function onExited(ctx: SchedulerContext, s: Session, fact: Extract<RunnerFact, { type: "exited" }>): Session | "illegal" | undefined {
  // The exit overtook the start: the running fact is late (nak'd after a
  // broker failover) or lost (produced under a runner generation that a
  // re-registration superseded). An exit that passed the fence proves the
  // process ran, so the start is committed first, on the runner's word, and
  // the exit on the next pass; the running fact, if it comes, is a duplicate.
  if (s.state === "creating") return transition(ctx, s, "running", "start", fact.runnerId);
  // A one-shot session is released as soon as its command exits (seed 002).
  const to = s.oneShot ? "destroyed" : "dead";
  if (!canTransition(s.state, to)) return s.state === "dead" || s.state === "destroyed" ? undefined : "illegal";
  const error = fact.signal ? `process killed by ${fact.signal}` : undefined;
  const patch = { childExitCode: fact.exitCode, ...(error ? { error } : {}) };
  return withUsage(transition(ctx, withoutPending(s), to, "exit", fact.runnerId, patch), s, fact);
}

/** A start report: applied to a creating record; one that comes after the record moved past creating is a duplicate. */
function onRunning(ctx: SchedulerContext, s: Session, fact: Extract<RunnerFact, { type: "running" }>): Session | "illegal" | undefined {
  // The record names the setup the runner booted with, whatever the environment says now.
  if (s.state === "creating") return transition(ctx, s, "running", "start", fact.runnerId, fact.setupHash !== undefined ? { setupHash: fact.setupHash } : {});
  // Past its start in this placement (the fence checked it is this one): an exit applied it, or it went on.
  if (s.state === "running" || s.state === "suspended_warm" || s.state === "dead" || s.state === "destroyed") return undefined;
  return "illegal";
}

function onSuspended(ctx: SchedulerContext, s: Session, fact: Extract<RunnerFact, { type: "suspended" }>): Session | "illegal" | undefined {
  const to = fact.warm ? "suspended_warm" : "suspended_cold";
  if (s.state === to) return undefined;
  if (!canTransition(s.state, to)) return "illegal";
  const checkpoint = fact.checkpoint ? { checkpoint: fact.checkpoint, checkpointedAt: fact.at } : {};
  const next = transition(ctx, withoutPending(s), to, "suspend", fact.runnerId, checkpoint);
  // A cold suspend ends the generation (the sandbox is gone); a warm one does not.
  return fact.warm ? next : withUsage(next, s, fact);
}

/**
 * One app generation's progress. Generations only grow (a cold resume or a
 * takeover continues from the record's, see dispatchStart); the run fact
 * names the generation on the revision, so its audit event carries it; the
 * generation a restart_app started settles that pending request.
 */
function onApp(ctx: SchedulerContext, s: Session, fact: Extract<RunnerFact, { type: "app" }>): Session | undefined {
  const held = s.apps?.[fact.app];
  const newer = !held || fact.run.generation > held.generation || (fact.run.generation === held.generation && held.phase === "running" && fact.run.phase !== "running");
  if (!newer) return undefined;
  const action = fact.run.phase === "running" ? "run.started" : fact.run.phase === "completed" ? "run.completed" : "run.failed";
  const settles = fact.requestId !== undefined && s.pending?.requestId === fact.requestId;
  const next = withFact(ctx, settles ? withoutPending(s) : s, action, fact.runnerId);
  const { app, run } = fact;
  next.lastFact.run = {
    app,
    generation: run.generation,
    trigger: run.trigger,
    ...(run.exitCode !== undefined ? { exitCode: run.exitCode } : {}),
    ...(run.signal !== undefined ? { signal: run.signal } : {}),
  };
  next.apps = { ...s.apps, [app]: run };
  return next;
}

/** The runner could not do the pending operation: it is cleared and the refusal recorded, so the caller gets the reason. */
function onRefused(ctx: SchedulerContext, s: Session, fact: Extract<RunnerFact, { type: "refused" }>): Session | undefined {
  if (s.pending?.requestId !== fact.requestId) return undefined;
  const next = withFact(ctx, withoutPending(s), "update", fact.runnerId);
  next.refusal = { requestId: fact.requestId, op: s.pending.op, reason: fact.reason, at: fact.at };
  return next;
}

/** What a fact asks of the record, or undefined when it changes nothing. */
function nextFor(ctx: SchedulerContext, s: Session, fact: RunnerFact): Session | "illegal" | undefined {
  const actor = fact.runnerId;
  switch (fact.type) {
    case "running":
      return onRunning(ctx, s, fact);
    case "exited":
      return onExited(ctx, s, fact);
    case "failed":
      if (!canTransition(s.state, "failed")) return s.state === "failed" ? undefined : "illegal";
      return transition(ctx, withoutPending(s), "failed", "fail", actor, { error: fact.reason });
    case "destroyed":
      // Teardown confirmed; the record already left the slot when it was deleted.
      return onDestroyed(ctx, s, fact);
    case "suspended":
      return onSuspended(ctx, s, fact);
    case "resumed":
      if (s.state === "running") return undefined;
      if (s.state !== "suspended_warm") return "illegal";
      return transition(ctx, withoutPending(s), "running", "resume", actor);
    case "checkpointed": {
      const settles = s.pending?.requestId === fact.requestId;
      const base = settles ? withoutPending(s) : s;
      const next = { ...withFact(ctx, base, "snapshot", actor), checkpoint: fact.checkpoint, checkpointedAt: fact.at };
      // A client's snapshot is kept by its request (a periodic checkpoint replaces `checkpoint`, not this).
      return settles && s.pending?.op === "snapshot" ? { ...next, snapshot: { requestId: fact.requestId, checkpoint: fact.checkpoint, at: fact.at } } : next;
    }
    case "refused":
      return onRefused(ctx, s, fact);
    case "app":
      return onApp(ctx, s, fact);
    case "env_snapshot":
      // Not a session change: applied to the environment by applyRunnerFact.
      return undefined;
  }
}

/** The checkpoint a fact reports with the key it was sealed with, if any. */
function sealedCheckpointOf(fact: RunnerFact): { ref: string; key: string } | undefined {
  if ((fact.type === "checkpointed" || fact.type === "suspended") && fact.checkpoint && fact.sealKey) return { ref: fact.checkpoint.ref, key: fact.sealKey };
  return undefined;
}

/** Whether the record places the session where and when the fact says it ran. */
function placedAt(s: Session, fact: RunnerFact): boolean {
  return s.runnerId === fact.runnerId && s.poolId === fact.poolId && s.placementGeneration === fact.placementGeneration;
}

/**
 * Whether a fact's body names the runner whose subject it was published on.
 * NATS permissions let a runner publish only under its own pool/runner
 * tokens, so the subject is the publisher's identity and the body is only its
 * word: a fact naming another runner is that runner's credentials speaking for
 * someone else (e.g. an `exited` for a session held elsewhere).
 */
export function factFromItsRunner(subject: string, fact: RunnerFact): boolean {
  const from = parseRunnerEventsSubject(subject);
  return from !== undefined && from.poolId === fact.poolId && from.runnerId === fact.runnerId;
}

/**
 * Applies one runner fact through the fence: the record must still place the
 * session on this runner at this placement generation, and the runner must
 * still hold this registration generation. Anything else is stale: dropped
 * and counted, never applied — including a dead or failed report from a
 * superseded runner.
 */
export async function applyRunnerFact(ctx: SchedulerContext, fact: RunnerFact, subject: string): Promise<Outcome> {
  if (!factFromItsRunner(subject, fact)) {
    ctx.metrics.foreignFacts.inc({ type: fact.type });
    return "foreign";
  }
  if (fact.type === "env_snapshot") {
    // A snapshot serves every later session of the environment: only the
    // runner that booted a session of it, in that placement, may record one.
    const built = (await ctx.sessions.get(sessionKey(fact.workspaceId, fact.sessionId)))?.value;
    if (!built || !placedAt(built, fact) || built.environmentId !== fact.environmentId) {
      ctx.metrics.staleFacts.inc({ type: fact.type });
      return "stale";
    }
    await ctx.applyEnvSnapshot(fact);
    return "applied";
  }
  const key = sessionKey(fact.workspaceId, fact.sessionId);
  for (let attempt = 0; ; attempt++) {
    // First try on the revision the view holds (no read): the CAS below names
    // it, so a stale view only loses the write. Nothing is ever dropped on the
    // view's word: any outcome but a write is decided again on an exact read.
    const fromView = attempt === 0 ? ctx.sessionView.get(key) : undefined;
    const [current, runner] = await Promise.all([fromView ?? ctx.sessions.get(key), ctx.runnerReads.get(runnerKey(fact.poolId, fact.runnerId))]);
    const s = current?.value;
    if (
      !current ||
      !s ||
      !runner ||
      // A lost runner's word counts for nothing until it registers again.
      runner.value.state === "lost" ||
      !placedAt(s, fact) ||
      runner.value.generation !== fact.runnerGeneration
    ) {
      if (fromView) continue;
      ctx.metrics.staleFacts.inc({ type: fact.type });
      return "stale";
    }
    const next = nextFor(ctx, s, fact);
    if (next === undefined || next === "illegal") {
      if (fromView) continue;
      if (next === undefined) return "duplicate";
      ctx.metrics.illegalFacts.inc({ type: fact.type });
      return "illegal";
    }
    // The key of a checkpoint this write records goes first: a record naming a checkpoint
    // whose key was lost could never be resumed. (Stored again on a retry: a no-op.)
    const sealed = sealedCheckpointOf(fact);
    if (sealed && next.checkpoint?.ref === sealed.ref) await ctx.sealKeys.put(sealed.ref, sealed.key);
    try {
      await writeSession(ctx, current, next);
    } catch (err) {
      if (err instanceof CasConflictError) continue;
      throw err;
    }
    if (occupiesSlot(s.state) && !occupiesSlot(next.state)) {
      await releaseSlot(ctx, s.poolId, s.runnerId);
      ctx.requestPlacement();
    }
    // The start an exit implied is written; the exit itself goes on the next pass.
    if (fact.type === "exited" && s.state === "creating") continue;
    return "applied";
  }
}
