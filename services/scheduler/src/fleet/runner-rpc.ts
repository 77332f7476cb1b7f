/**
 * What runners ask the scheduler besides registration, answered from the
 * session record (the authority on who holds a session at which generation):
 * whether a placement is still current (terminal-log fence resolution), the
 * secret envelopes and service token a runner needs to boot a session it holds, and which held
 * sessions ended without their teardown reaching the runner.
 */
import { Kvm, type KV } from "@nats-io/kv";
import type { Subscription } from "@nats-io/transport-node";
import {
  Buckets,
  ConflictError,
  FleetRpc,
  ForbiddenError,
  inboxPrefixOf,
  NotFoundError,
  runnerKey,
  runnerNatsUser,
  secretKey,
  sessionKey,
  type HeldCheckReply,
  type HeldCheckRequest,
  type HeldSession,
  type PlacementCheckReply,
  type PlacementCheckRequest,
  type Session,
  type SessionSecretsReply,
  type SessionSecretsRequest,
} from "@paddock/contracts";
import { serveRpc, type RpcMeta } from "@paddock/bus";
import type { SchedulerContext } from "../context.ts";
import { sessionTokenOf } from "./tokens.ts";

/** States in which a runner boots (or restarts apps of) a session and may need its secrets. */
const SECRET_STATES: ReadonlySet<Session["state"]> = new Set(["creating", "running"]);

function placedThere(s: Session, req: PlacementCheckRequest): boolean {
  return s.poolId === req.poolId && s.runnerId === req.runnerId && s.placementGeneration === req.placementGeneration;
}

export async function checkPlacement(ctx: SchedulerContext, req: PlacementCheckRequest): Promise<PlacementCheckReply> {
  const s = await ctx.sessions.get(sessionKey(req.workspaceId, req.sessionId));
  return { current: s !== undefined && placedThere(s.value, req) };
}

export interface SecretsDeps {
  /**
   * Whether NATS principals are distinct (per-principal credentials with
   * per-user inbox prefixes). Then an answer goes only to the inbox of the
   * runner the session is placed on; without credentials anyone on the bus
   * could read anything anyway.
   */
  requireRunnerInbox: boolean;
  secrets: () => Promise<KV>;
}

export async function sessionSecrets(ctx: SchedulerContext, deps: SecretsDeps, req: SessionSecretsRequest, meta: RpcMeta): Promise<SessionSecretsReply> {
  if (deps.requireRunnerInbox && !meta.reply?.startsWith(`${inboxPrefixOf(runnerNatsUser(req.poolId, req.runnerId))}.`)) {
    ctx.metrics.secretsRefused.inc({ reason: "inbox" });
    throw new ForbiddenError("secrets are answered only to the inbox of the runner that holds the session");
  }
  const s = await ctx.sessions.get(sessionKey(req.workspaceId, req.sessionId));
  if (!s || !placedThere(s.value, req)) {
    ctx.metrics.secretsRefused.inc({ reason: "placement" });
    throw new NotFoundError("no such placement");
  }
  if (!SECRET_STATES.has(s.value.state)) throw new ConflictError(`a ${s.value.state} session is not booting`);
  const env = s.value.environmentId === undefined ? undefined : await ctx.envs.find(req.workspaceId, s.value.environmentId);
  const allowed = new Set(env?.value.secretRefs ?? []);
  if (!req.names.every((name) => allowed.has(name))) {
    ctx.metrics.secretsRefused.inc({ reason: "not_referenced" });
    throw new ForbiddenError("only secrets the session's environment references are released");
  }
  const kv = await deps.secrets();
  // Derived, not read: the record of this placement's token was stored before its start was sent.
  const sessionToken = req.token === true ? sessionTokenOf(ctx, { id: req.sessionId }, req.placementGeneration) : undefined;
  const secrets = await Promise.all(
    req.names.map(async (name) => {
      const entry = await kv.get(secretKey(req.workspaceId, name));
      return entry?.operation === "PUT" ? { name, envelope: Buffer.from(entry.value).toString("base64") } : { name };
    }),
  );
  return { secrets, ...(sessionToken !== undefined ? { sessionToken } : {}) };
}

/** States in which a record no longer needs its sandbox. A dead one keeps its workspace until the record expires. */
const RELEASED_STATES: ReadonlySet<Session["state"]> = new Set(["destroyed", "failed", "canceled"]);

/** A record that ended more recently than this is not named: its teardown is most likely still on its way. */
export const HELD_CHECK_GRACE_MS = 10_000;

/**
 * Answers which held placements ended without their teardown reaching the
 * runner. The local view picks the candidates (it lags, never leads: one it
 * still shows live is caught on a later check); each candidate is confirmed
 * on an exact read, so a session placed a moment ago is never named.
 */
export async function checkHeld(ctx: SchedulerContext, deps: Pick<SecretsDeps, "requireRunnerInbox">, req: HeldCheckRequest, meta: RpcMeta): Promise<HeldCheckReply> {
  if (deps.requireRunnerInbox && !meta.reply?.startsWith(`${inboxPrefixOf(runnerNatsUser(req.poolId, req.runnerId))}.`)) {
    throw new ForbiddenError("held checks are answered only to the inbox of the runner that asks");
  }
  const runner = await ctx.runners.get(runnerKey(req.poolId, req.runnerId));
  if (!runner || runner.value.state === "lost" || runner.value.generation !== req.runnerGeneration) {
    throw new ConflictError("this runner generation is not the registered one; register again");
  }
  const endedBefore = ctx.now() - HELD_CHECK_GRACE_MS;
  const released = (s: Session | undefined, h: HeldSession): boolean =>
    !s ||
    (s.poolId === req.poolId &&
      s.runnerId === req.runnerId &&
      s.placementGeneration === h.placementGeneration &&
      RELEASED_STATES.has(s.state) &&
      s.updatedAt <= endedBefore);
  const candidates = req.sessions.filter((h) => released(ctx.sessionView.get(sessionKey(h.workspaceId, h.sessionId))?.value, h));
  const confirmed = await Promise.all(candidates.map(async (h) => released((await ctx.sessions.get(sessionKey(h.workspaceId, h.sessionId)))?.value, h)));
  return { ended: candidates.filter((_, i) => confirmed[i]) };
}

/** Serves the runner calls in the scheduler queue group. */
export function serveRunnerRpc(ctx: SchedulerContext): Subscription[] {
  let opening: Promise<KV> | undefined;
  const deps: SecretsDeps = {
    requireRunnerInbox: ctx.config.natsUser !== undefined,
    secrets: () =>
      (opening ??= new Kvm(ctx.nc).open(Buckets.secrets).catch((err: unknown) => {
        opening = undefined;
        throw err;
      })),
  };
  const opts = { metrics: ctx.bus, log: ctx.log };
  return [
    serveRpc(ctx.nc, FleetRpc.placementCheck, (req) => checkPlacement(ctx, req), opts),
    serveRpc(ctx.nc, FleetRpc.sessionSecrets, (req, meta) => sessionSecrets(ctx, deps, req, meta), opts),
    serveRpc(ctx.nc, FleetRpc.heldCheck, (req, meta) => checkHeld(ctx, deps, req, meta), opts),
  ];
}
