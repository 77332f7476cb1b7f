import { decode, encodeAuthorizationResponse, encodeUser, fromPublic, fromSeed, type AuthorizationRequest, type KeyPair, type User } from "@nats-io/jwt";
import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { AUTH_CALLOUT_SUBJECT, runnerPermissions, runnerUser, type Permissions, type RunnerIdentity } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { JoinStore } from "./join-store.ts";

/** Queue group of the callout: one gateway replica answers each connection. */
export const CALLOUT_QUEUE = "paddock-auth-callout";
/** Config mode: every authorised user lands in the global account. */
const GLOBAL_ACCOUNT = "$G";
/** A runner may answer each request it received once within a minute (allow_responses of the static users). */
const RESPONSE_TTL_NS = 60_000_000_000;

export interface CalloutOptions {
  issuerSeed: string;
  credentialsTtlMs: number;
  now: () => number;
  log: Logger;
}

/** Why a connection was refused: logged and counted, never with a key's secret half (there is none here). */
export const CalloutRefusal = {
  noNonce: "no_nonce",
  noKey: "no_key",
  badSignature: "bad_signature",
  unknownKey: "unknown_key",
  revoked: "revoked",
  malformed: "malformed",
} as const;
export type CalloutRefusal = (typeof CalloutRefusal)[keyof typeof CalloutRefusal];

/**
 * The nats-server auth callout (config mode, docs/decisions/0061-runner-join.md):
 * every connection that is not a configured user is sent here. It is admitted
 * only when it proves it holds a joined runner's nkey (its signature of the
 * server's nonce) and that runner is not revoked; it then gets a user JWT
 * with exactly that runner's permissions (runnerPermissions, the same lists
 * static runners get), named as that runner, expiring after
 * `credentialsTtlMs` (it reconnects and is checked again).
 */
export class AuthCallout {
  private readonly issuer: KeyPair;
  private sub: Subscription | undefined;
  readonly refused = new Map<CalloutRefusal, number>();

  constructor(
    private readonly nc: NatsConnection,
    private readonly store: JoinStore,
    private readonly opts: CalloutOptions,
  ) {
    this.issuer = fromSeed(new TextEncoder().encode(opts.issuerSeed));
  }

  start(): void {
    this.sub = this.nc.subscribe(AUTH_CALLOUT_SUBJECT, {
      queue: CALLOUT_QUEUE,
      callback: (err, msg) => {
        if (err) return this.opts.log.warn({ err }, "auth callout subscription failed");
        void this.answer(msg).catch((e: unknown) => this.opts.log.warn({ err: e }, "auth callout answer failed"));
      },
    });
  }

  stop(): void {
    this.sub?.unsubscribe();
  }

  private async answer(msg: Msg): Promise<void> {
    let req: AuthorizationRequest;
    try {
      // The server signs its request with its own nkey (checked here); the subject is only the server's to publish on.
      req = decode<AuthorizationRequest>(msg.string()).nats as AuthorizationRequest;
    } catch (err) {
      this.opts.log.warn({ err }, "auth callout: undecodable request");
      return;
    }
    const server = req.server_id.id;
    const userNkey = req.user_nkey;
    const verdict = await this.authorize(req);
    const data = "refusal" in verdict ? { error: `not authorized (${verdict.refusal})` } : { jwt: verdict.jwt };
    if ("refusal" in verdict) {
      this.refused.set(verdict.refusal, (this.refused.get(verdict.refusal) ?? 0) + 1);
      this.opts.log.warn({ refusal: verdict.refusal, publicKey: req.connect_opts.nkey, host: req.client_info.host }, "runner connection refused");
    }
    msg.respond(await encodeAuthorizationResponse(userNkey, server, this.issuer, data, {}));
  }

  /** The user JWT for this connection, or why it is refused. */
  async authorize(req: AuthorizationRequest): Promise<{ jwt: string } | { refusal: CalloutRefusal }> {
    const publicKey = req.connect_opts.nkey;
    const nonce = req.client_info.nonce;
    const sig = req.connect_opts.sig;
    if (!publicKey) return { refusal: CalloutRefusal.noKey };
    // Without the server's nonce a public key proves nothing (the server sends one only when it has an nkey user).
    if (!nonce || !sig) return { refusal: CalloutRefusal.noNonce };
    if (!verifies(publicKey, nonce, sig)) return { refusal: CalloutRefusal.badSignature };
    const identity = await this.store.identityOfKey(publicKey);
    if (!identity || identity.publicKey !== publicKey) return { refusal: CalloutRefusal.unknownKey };
    const byId = await this.store.identity(identity.runnerId);
    if (identity.revokedAt !== undefined || byId?.publicKey !== publicKey || byId.revokedAt !== undefined) return { refusal: CalloutRefusal.revoked };
    return { jwt: await this.userJwt(identity, req.user_nkey) };
  }

  /** The runner's user JWT: its own permissions, peers' stores readable (a takeover restores from them). */
  private async userJwt(identity: RunnerIdentity, userNkey: string): Promise<string> {
    const peers = (await this.store.all()).map((p) => ({ poolId: p.poolId, runnerId: p.runnerId }));
    const perms = runnerPermissions({ poolId: identity.poolId, runnerId: identity.runnerId }, peers);
    const expSec = Math.floor((this.opts.now() + this.opts.credentialsTtlMs) / 1000);
    return encodeUser(runnerUser(identity.poolId, identity.runnerId), userNkey, this.issuer, jwtPermissions(perms), { aud: GLOBAL_ACCOUNT, exp: expSec });
  }
}

/** The nonce signature nats.js sends (base64url, as nkeys.js encodes it). */
function verifies(publicKey: string, nonce: string, sig: string): boolean {
  try {
    return fromPublic(publicKey).verify(new TextEncoder().encode(nonce), Buffer.from(sig, "base64url"));
  } catch {
    return false;
  }
}

/** Permissions as a user JWT carries them (the same lists nats-server config renders). */
export function jwtPermissions(p: Permissions): Partial<User> {
  return {
    pub: { allow: p.publish.allow, deny: p.publish.deny ?? [] },
    sub: { allow: p.subscribe.allow, deny: p.subscribe.deny ?? [] },
    ...(p.allowResponses ? { resp: { max: 1, ttl: RESPONSE_TTL_NS } } : {}),
  };
}
