import { fromPublic } from "@nats-io/jwt";
import { Api, Buckets, ConflictError, DEFAULT_JOIN_TOKEN_TTL_MS, HttpApi, InvalidError, NotFoundError, PublicApi, runnerUser, type HttpRoute } from "@paddock/contracts";
import { Action, lazyKv } from "../auth/auth.ts";
import type { RunnerJoinConfig } from "../config.ts";
import { workspaceResource, type GatewayContext } from "../context.ts";
import { serve, type Answer, type Input, type Route } from "../http/http.ts";
import { AuthCallout } from "./callout.ts";
import { ConnectionKicker } from "./kick.ts";
import { JoinStore } from "./join-store.ts";

/** Why revoked runners are lost: on their record (lostReason) and in the audit. */
export const REVOKED_REASON = "revoked: its identity was revoked by a fleet operator";

export interface RunnerJoin {
  routes: Route[];
  start(): void;
  stop(): Promise<void>;
}

/**
 * Runners on remote hosts (docs/decisions/0061-runner-join.md): join tokens,
 * the join itself, revocation, and the auth callout that admits joined
 * runners to NATS. Without PADDOCK_AUTH_CALLOUT_ISSUER_SEED the routes are
 * not_found (after authentication and authorization) and no callout runs.
 * No join token and no seed is ever logged.
 */
export function runnerJoin(ctx: GatewayContext): RunnerJoin {
  const { config, log, now, nc } = ctx.deps;
  const settings = config.runnerJoin;
  const store = new JoinStore(nc, lazyKv(nc, Buckets.joinTokens), lazyKv(nc, Buckets.runnerIdentities), now);
  const callout = settings ? new AuthCallout(nc, store, { issuerSeed: settings.issuerSeed, credentialsTtlMs: settings.credentialsTtlMs, now, log }) : undefined;
  const kicker = settings?.systemSeed !== undefined ? new ConnectionKicker(config.natsUrl, settings.systemSeed, log) : undefined;
  const enabled = (): RunnerJoinConfig => {
    if (!settings) throw new NotFoundError("runner join (no PADDOCK_AUTH_CALLOUT_ISSUER_SEED)");
    return settings;
  };
  const open = <R extends HttpRoute>(contract: R, handler: (input: Input<R, undefined>) => Promise<Answer<R> | void>) =>
    serve(contract, { authenticate: () => Promise.resolve(undefined), maxBodyBytes: config.maxBodyBytes }, handler);

  /**
   * A runner's credentials name the peers whose stores it may read as they
   * were when it connected. The pool's other joined runners are made to
   * reconnect (their connections kicked; nats.js reconnects at once and the
   * callout answers with the newcomer among their peers), so that any of them
   * can resume the newcomer's sessions from its store. Best effort: one not
   * refreshed now is at its next reconnect (credentialsTtlMs at the latest).
   */
  const refreshPeers = async (poolId: string, newcomer: string): Promise<void> => {
    if (!kicker) return;
    const others = (await store.all()).filter((p) => p.poolId === poolId && p.runnerId !== newcomer && p.revokedAt === undefined);
    const kicked = await Promise.allSettled(others.map((p) => kicker.kickUser(runnerUser(p.poolId, p.runnerId))));
    const failed = kicked.filter((k) => k.status === "rejected").length;
    if (failed > 0) log.warn({ poolId, failed }, "some peers' credentials were not refreshed after a join");
  };

  const routes: Route[] = [
    ctx.serve(HttpApi.createJoinToken, async ({ caller, body }) => {
      const { poolId, ttlMs } = await body();
      await ctx.authorizer.authorize(caller.scope, Action.createJoinToken, workspaceResource(caller.scope));
      enabled();
      ctx.creates.check(caller.tokenHash, "join token creates");
      const created = await store.mint(poolId, ttlMs ?? DEFAULT_JOIN_TOKEN_TTL_MS, caller.scope.actor.id);
      log.info({ poolId, expiresAt: created.expiresAt, actorId: caller.scope.actor.id }, "join token minted");
      return { status: 201, body: created };
    }),

    open(PublicApi.joinRunner, async ({ req, body }) => {
      // Each attempt may write to KV before anyone is known: bounded per client address.
      ctx.creates.check(`runner-join.${req.socket.remoteAddress ?? "?"}`, "runner joins");
      const { joinToken, runnerId: asked, publicKey } = await body();
      const joined = enabled();
      if (!isUserKey(publicKey)) throw new InvalidError("publicKey: not the public key of a user nkey (checksum)");
      const { record, revision } = await store.check(joinToken);
      const runnerId = asked ?? `runner-${ctx.deps.newId().slice(0, 8)}`;
      // Checked before the token is spent, so a taken id costs the runner nothing (the register below re-checks).
      if (await store.identity(runnerId)) throw new ConflictError(`runner id ${runnerId} has already joined`);
      if (await store.identityOfKey(publicKey)) throw new ConflictError("this public key has already joined");
      await store.spend(joinToken, revision);
      await store.register({ runnerId, poolId: record.poolId, publicKey, joinedAt: now() });
      log.info({ runnerId, poolId: record.poolId, publicKey }, "runner joined");
      await refreshPeers(record.poolId, runnerId);
      return { status: 201, body: { runnerId, poolId: record.poolId, natsUrls: joined.natsUrls } };
    }),

    ctx.serve(HttpApi.revokeRunner, async ({ caller: { scope }, params, body }) => {
      await body();
      await ctx.authorizer.authorize(scope, Action.revokeRunner, workspaceResource(scope));
      enabled();
      // Refused from now on: the callout reads the identity at every connect.
      const identity = await store.revoke(params.id);
      const connectionsClosed = kicker ? await kicker.kickUser(runnerUser(identity.poolId, identity.runnerId)) : 0;
      if (!kicker) log.warn({ runnerId: identity.runnerId }, "revoked without PADDOCK_NATS_SYSTEM_SEED: live connections stay until their credentials expire");
      // Its sessions move on now, not after its lease would have expired.
      await ctx.call(Api.loseRunner, { scope, poolId: identity.poolId, runnerId: identity.runnerId, reason: REVOKED_REASON });
      log.warn({ runnerId: identity.runnerId, poolId: identity.poolId, connectionsClosed, actorId: scope.actor.id }, "runner revoked");
      return { status: 200, body: { identity, connectionsClosed } };
    }),
  ];
  return {
    routes,
    start: () => callout?.start(),
    stop: async () => {
      callout?.stop();
      await kicker?.close();
    },
  };
}

function isUserKey(publicKey: string): boolean {
  try {
    fromPublic(publicKey);
    return true;
  } catch {
    return false;
  }
}
