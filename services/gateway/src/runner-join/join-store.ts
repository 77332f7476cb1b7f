import { randomBytes } from "node:crypto";
import type { KV } from "@nats-io/kv";
import { decodeJson, encoderOf } from "@paddock/bus";
import {
  ConflictError,
  JOIN_TOKEN_PREFIX,
  JoinToken,
  JoinTokenRecord,
  NotFoundError,
  RunnerIdentity,
  UnauthenticatedError,
  type CreatedJoinToken,
} from "@paddock/contracts";
import type { NatsConnection } from "@nats-io/transport-node";
import { hashToken } from "../auth/auth.ts";

/** Every refusal of a join token (unknown, malformed, expired, spent) is this one error: no oracle. */
export class JoinTokenRefusedError extends UnauthenticatedError {
  constructor(options?: { cause?: unknown }) {
    super("missing or invalid join token", options);
    this.name = "JoinTokenRefusedError";
  }
}

/**
 * KV `runner-identities` holds each joined runner twice: under `id.<runnerId>`
 * (ids are unique) and under `key.<publicKey>` (what the auth callout looks
 * up). Both carry the same record; a revoke writes `id.` first, and the
 * callout refuses unless both say not revoked.
 */
const idKey = (runnerId: string) => `id.${runnerId}`;
const pubKey = (publicKey: string) => `key.${publicKey}`;

export class JoinStore {
  constructor(
    private readonly nc: NatsConnection,
    private readonly tokens: () => Promise<KV>,
    private readonly identities: () => Promise<KV>,
    private readonly now: () => number,
  ) {}

  /** A fresh token for a pool, stored as its sha256 only; the value is returned once. */
  async mint(poolId: string, ttlMs: number, createdBy: string): Promise<CreatedJoinToken> {
    const token = JOIN_TOKEN_PREFIX + randomBytes(32).toString("base64url");
    const createdAt = this.now();
    const record: JoinTokenRecord = { poolId, expiresAt: createdAt + ttlMs, createdBy, createdAt };
    await (await this.tokens()).create(hashToken(token), encoderOf(this.nc)(JoinTokenRecord, record));
    return { token, poolId, expiresAt: record.expiresAt };
  }

  /** The token's record if it is well-formed, known, unspent and unexpired; refused otherwise. Spends nothing. */
  async check(token: string): Promise<{ record: JoinTokenRecord; revision: number }> {
    if (!JoinToken.safeParse(token).success) throw new JoinTokenRefusedError();
    const entry = await (await this.tokens()).get(hashToken(token));
    const decoded = entry?.operation === "PUT" ? decodeJson(JoinTokenRecord, entry.value) : undefined;
    if (!entry || !decoded?.ok || decoded.value.expiresAt <= this.now()) throw new JoinTokenRefusedError();
    return { record: decoded.value, revision: entry.revision };
  }

  /** Spends a checked token: a delete at the revision read, so of two joins racing on one token one wins. */
  async spend(token: string, revision: number): Promise<void> {
    try {
      await (await this.tokens()).delete(hashToken(token), { previousSeq: revision });
    } catch (err) {
      throw new JoinTokenRefusedError({ cause: err });
    }
  }

  async identity(runnerId: string): Promise<RunnerIdentity | undefined> {
    return this.read(idKey(runnerId));
  }

  async identityOfKey(publicKey: string): Promise<RunnerIdentity | undefined> {
    return this.read(pubKey(publicKey));
  }

  /** Registers a joined runner; a taken id or an already registered key is a conflict. */
  async register(identity: RunnerIdentity): Promise<void> {
    const kv = await this.identities();
    const bytes = encoderOf(this.nc)(RunnerIdentity, identity);
    try {
      await kv.create(idKey(identity.runnerId), bytes);
    } catch (err) {
      throw new ConflictError(`runner id ${identity.runnerId} has already joined`, { cause: err });
    }
    try {
      await kv.create(pubKey(identity.publicKey), bytes);
    } catch (err) {
      await kv.purge(idKey(identity.runnerId)).catch(() => undefined);
      throw new ConflictError("this public key has already joined", { cause: err });
    }
  }

  /** Marks a runner revoked (idempotent: a second revoke keeps the first time). */
  async revoke(runnerId: string): Promise<RunnerIdentity> {
    const current = await this.identity(runnerId);
    if (!current) throw new NotFoundError("runner identity");
    const revoked: RunnerIdentity = { ...current, revokedAt: current.revokedAt ?? this.now() };
    const kv = await this.identities();
    const bytes = encoderOf(this.nc)(RunnerIdentity, revoked);
    await kv.put(idKey(runnerId), bytes);
    await kv.put(pubKey(current.publicKey), bytes);
    return revoked;
  }

  /**
   * Every joined runner, revoked ones included: the peers whose stores a
   * runner may read. A revoked runner's store still holds the checkpoints its
   * sessions resume from elsewhere.
   */
  async all(): Promise<RunnerIdentity[]> {
    const kv = await this.identities();
    const out: RunnerIdentity[] = [];
    for await (const key of await kv.keys("id.*")) {
      const identity = await this.read(key);
      if (identity) out.push(identity);
    }
    return out;
  }

  private async read(key: string): Promise<RunnerIdentity | undefined> {
    const entry = await (await this.identities()).get(key);
    const decoded = entry?.operation === "PUT" ? decodeJson(RunnerIdentity, entry.value) : undefined;
    return decoded?.ok ? decoded.value : undefined;
  }
}
