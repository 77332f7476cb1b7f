import {
  ConflictError,
  inboxPrefixOf,
  NotFoundError,
  occupiesSlot,
  parseRegisterSubject,
  runnerKey,
  runnerNatsUser,
  type RegisterRunnerReply,
  type RegisterRunnerRequest,
  type Runner,
  type Session,
  type SettableRunnerState,
} from "@paddock/contracts";
import type { SchedulerContext } from "../context.ts";
import { SCHEDULER_ACTOR, transition, writeSession } from "../state/writes.ts";
import { dispatchStart } from "./slots.ts";
import { CasConflictError, type Versioned } from "../state/store.ts";

function sessionsPlacedOn(ctx: SchedulerContext, poolId: string, runnerId: string): Session[] {
  const placed: Session[] = [];
  for (const key of ctx.sessionIndex.placedOn(poolId, runnerId)) {
    const value = ctx.sessionView.get(key)?.value;
    if (value?.poolId === poolId && value.runnerId === runnerId && occupiesSlot(value.state)) placed.push(value);
  }
  return placed;
}

/** The state a registration keeps: an operator's drain or cordon outlives a restart, and a loss. */
function operatorStateOf(r: Runner | undefined): Runner["state"] {
  if (r?.state === "draining" || r?.state === "cordoned") return r.state;
  return r?.state === "lost" && r.stateBeforeLost ? r.stateBeforeLost : "active";
}

/**
 * Stores the claim if it is newer than the stored generation, by create or
 * compare-and-set; a stale claim is refused with the authoritative generation.
 */
async function claimRegistration(
  ctx: SchedulerContext,
  req: RegisterRunnerRequest,
): Promise<{ accepted: boolean; generation: number; written?: Versioned<Runner> }> {
  const key = runnerKey(req.poolId, req.runnerId);
  for (;;) {
    const current = await ctx.runners.get(key);
    if (current && current.value.generation >= req.generation) {
      return { accepted: false, generation: current.value.generation };
    }
    const at = ctx.now();
    const next: Runner = {
      id: req.runnerId,
      poolId: req.poolId,
      state: operatorStateOf(current?.value),
      generation: req.generation,
      capacityUsed: sessionsPlacedOn(ctx, req.poolId, req.runnerId).length,
      capacityTotal: req.capacityTotal,
      capabilities: req.capabilities,
      ...(req.resources ? { resources: req.resources } : {}),
      registeredAt: current?.value.registeredAt ?? at,
      lastSeenAt: at,
    };
    try {
      const written = current ? await ctx.runners.update(key, next, current.revision) : await ctx.runners.create(key, next);
      ctx.runnerView.apply(key, written);
      return { accepted: true, generation: req.generation, written };
    } catch (err) {
      if (!(err instanceof CasConflictError) && !(err instanceof ConflictError)) throw err;
    }
  }
}

/**
 * Reconciles what a (re)registered runner holds against the records: held
 * sandboxes no live record places there are destroyed; records whose sandbox
 * the runner no longer holds are re-dispatched (creating) or end as dead; the
 * rest are kept and named with their records' states (the runner states
 * again what its sandbox says otherwise).
 */
async function reconcile(ctx: SchedulerContext, req: RegisterRunnerRequest, generation: number): Promise<Pick<RegisterRunnerReply, "destroy" | "kept">> {
  const placed = sessionsPlacedOn(ctx, req.poolId, req.runnerId);
  const held = new Map(req.sessions.map((h) => [h.sessionId, h]));
  const destroy = req.sessions.filter((h) => {
    const s = placed.find((p) => p.id === h.sessionId);
    return !s || s.placementGeneration !== h.placementGeneration;
  });
  const kept = placed.flatMap((s) => {
    const h = held.get(s.id);
    return h && h.placementGeneration === s.placementGeneration ? [{ sessionId: s.id, placementGeneration: s.placementGeneration, state: s.state }] : [];
  });
  for (const s of placed) {
    const h = held.get(s.id);
    if (h && h.placementGeneration === s.placementGeneration) continue;
    if (s.state === "creating") {
      await dispatchStart(ctx, s, generation);
      continue;
    }
    const current = await ctx.sessions.get(ctx.sessions.keyOf(s));
    if (!current || current.value.placementGeneration !== s.placementGeneration || !occupiesSlot(current.value.state)) continue;
    const next = transition(ctx, current.value, "dead", "exit", SCHEDULER_ACTOR, { error: "runner_lost: the runner restarted without this sandbox" });
    try {
      await writeSession(ctx, current, next);
    } catch (err) {
      if (!(err instanceof CasConflictError)) throw err;
    }
  }
  return { destroy, kept };
}

/**
 * Why a registration must not be acted on, if it must not. The subject is the
 * publisher's identity (NATS permissions let a runner publish only under its
 * own pool/runner tokens), so a body naming another runner is refused — else a
 * runner could claim another's generation and have its sessions reconciled
 * away. With per-principal credentials the answer must also go to the named
 * runner's own inbox, as secrets and held checks are.
 */
export function registrationRefusal(ctx: SchedulerContext, subject: string, reply: string | undefined, req: RegisterRunnerRequest): "subject" | "inbox" | undefined {
  const from = parseRegisterSubject(subject);
  if (!from || from.poolId !== req.poolId || from.runnerId !== req.runnerId) return "subject";
  if (ctx.config.natsUser !== undefined && !reply?.startsWith(`${inboxPrefixOf(runnerNatsUser(req.poolId, req.runnerId))}.`)) return "inbox";
  return undefined;
}

export async function registerRunner(ctx: SchedulerContext, req: RegisterRunnerRequest): Promise<RegisterRunnerReply> {
  const claim = await claimRegistration(ctx, req);
  if (!claim.accepted) return { accepted: false, generation: claim.generation, destroy: [] };
  const { destroy, kept } = await reconcile(ctx, req, claim.generation);
  // Sessions that reconciliation ended free their slots: recount, but only on
  // the revision the claim wrote. A placement may already have reserved slots
  // whose sessions are not creating yet; a recount over that would let the
  // runner be filled past its capacity. If one did, the capacity repair
  // recounts after its quiet period instead.
  const used = sessionsPlacedOn(ctx, req.poolId, req.runnerId).length;
  if (claim.written && claim.written.value.capacityUsed !== used) {
    const key = runnerKey(req.poolId, req.runnerId);
    try {
      ctx.runnerView.apply(key, await ctx.runners.update(key, { ...claim.written.value, capacityUsed: used }, claim.written.revision));
    } catch (err) {
      if (!(err instanceof CasConflictError)) throw err;
    }
  }
  ctx.log.info({ runnerId: req.runnerId, poolId: req.poolId, generation: claim.generation, destroy: destroy.length }, "runner registered");
  ctx.requestPlacement();
  return { accepted: true, generation: claim.generation, destroy, kept };
}

/** Drain, cordon or reactivate a runner. A lost runner becomes active only by registering again. */
export async function setRunnerState(ctx: SchedulerContext, runnerId: string, state: SettableRunnerState): Promise<Runner> {
  const matches = [...ctx.runnerView.values()].filter((v) => v.value.id === runnerId);
  if (matches.length === 0) throw new NotFoundError("runner");
  if (matches.length > 1) throw new ConflictError(`runner id ${runnerId} is used in several pools`);
  const held = matches[0]?.value;
  if (!held) throw new NotFoundError("runner");
  const key = runnerKey(held.poolId, held.id);
  let refused: string | undefined;
  const written = await ctx.runners.mutate(key, (r) => {
    if (r.state === "lost") {
      refused = "the runner is lost; it takes its state before the loss again when it registers";
      return undefined;
    }
    return r.state === state ? undefined : { ...r, state };
  });
  if (refused) throw new ConflictError(refused);
  if (!written) throw new NotFoundError("runner");
  ctx.runnerView.apply(key, written);
  if (state === "active") ctx.requestPlacement();
  return ctx.leases.withLastSeen(written.value);
}
