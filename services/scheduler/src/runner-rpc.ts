/**
 * What runners ask the scheduler besides registration, answered from the
 * session record (the authority on who holds a session at which generation):
 * whether a placement is still current (terminal-log fence resolution), and
 * the secret envelopes a runner needs to boot a session it holds.
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
  runnerNatsUser,
  secretKey,
  sessionKey,
  type PlacementCheckReply,
  type PlacementCheckRequest,
  type Session,
  type SessionSecretsReply,
  type SessionSecretsRequest,
} from "@paddock/contracts";
import { serveRpc, type RpcMeta } from "@paddock/bus";
import type { SchedulerContext } from "./context.ts";

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
  const secrets = await Promise.all(
    req.names.map(async (name) => {
      const entry = await kv.get(secretKey(req.workspaceId, name));
      return entry?.operation === "PUT" ? { name, envelope: Buffer.from(entry.value).toString("base64") } : { name };
    }),
  );
  return { secrets };
}

/** Serves both calls in the scheduler queue group. */
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
  ];
}
