import type { JetStreamManager } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import type { z } from "zod";
import type { Runner, Session} from "@paddock/contracts";
import { ConflictError, runnerKey, sessionKey, UnavailableError } from "@paddock/contracts";
import { decodeJson, isWrongLastSequence, readLatestFromLeader, type Encoder } from "@paddock/bus";

/** A value read from KV together with the revision a compare-and-set must name. */
export interface Versioned<T> {
  value: T;
  revision: number;
}

/** Thrown when a compare-and-set lost: someone else wrote first. Retryable. */
export class CasConflictError extends UnavailableError {
  constructor(key: string, options?: { cause?: unknown }) {
    super(`concurrent update of ${key}`, options);
  }
}

/** Where exact reads go: the bucket's stream leader. */
export interface LeaderReads {
  jsm: JetStreamManager;
  bucket: string;
}

/**
 * Typed access to one KV bucket where every write is a create or a
 * compare-and-set on the revision read: the store-side half of fencing.
 * With `leader`, reads are answered by the bucket's stream leader, so a
 * decision taken on one (a fence) never rests on a lagging replica.
 * Writes are encoded with the bus's encoder (encoderOf), which checks them
 * against the schema as the bus's outgoing validation says.
 */
export class Records<S extends z.ZodType> {
  constructor(
    private readonly kv: KV,
    private readonly schema: S,
    private readonly encode: Encoder,
    private readonly leader?: LeaderReads,
  ) {}

  async get(key: string): Promise<Versioned<z.infer<S>> | undefined> {
    const entry = await this.read(key);
    if (!entry) return undefined;
    const decoded = decodeJson(this.schema, entry.value);
    if (!decoded.ok) throw new UnavailableError(`stored record ${key} is unreadable`);
    return { value: decoded.value, revision: entry.revision };
  }

  private async read(key: string): Promise<{ value: Uint8Array; revision: number } | undefined> {
    if (this.leader) return readLatestFromLeader(this.leader.jsm, this.leader.bucket, key);
    const entry = await this.kv.get(key);
    return entry?.operation === "PUT" ? { value: entry.value, revision: entry.revision } : undefined;
  }

  /** Creates the key; ConflictError when it already exists. */
  async create(key: string, value: z.input<S>): Promise<Versioned<z.infer<S>>> {
    try {
      const revision = await this.kv.create(key, this.encode(this.schema, value));
      return { value: value as z.infer<S>, revision };
    } catch (err) {
      if (isWrongLastSequence(err)) throw new ConflictError(`${key} already exists`, { cause: err });
      throw err;
    }
  }

  /** Writes only if the key is still at `revision`; CasConflictError otherwise. */
  async update(key: string, value: z.input<S>, revision: number): Promise<Versioned<z.infer<S>>> {
    try {
      const next = await this.kv.update(key, this.encode(this.schema, value), revision);
      return { value: value as z.infer<S>, revision: next };
    } catch (err) {
      if (isWrongLastSequence(err)) throw new CasConflictError(key, { cause: err });
      throw err;
    }
  }

  /** Deletes the key (a delete marker; the change feed skips it). */
  async remove(key: string): Promise<void> {
    await this.kv.delete(key);
  }

  /**
   * Read-modify-write with compare-and-set, retried on lost races. `change`
   * returns the next value, or undefined to write nothing.
   */
  async mutate(
    key: string,
    change: (current: z.infer<S>) => z.input<S> | undefined,
    attempts = 20,
  ): Promise<Versioned<z.infer<S>> | undefined> {
    for (let i = 0; i < attempts; i++) {
      const current = await this.get(key);
      if (!current) return undefined;
      const next = change(current.value);
      if (next === undefined) return current;
      try {
        return await this.update(key, next, current.revision);
      } catch (err) {
        if (!(err instanceof CasConflictError)) throw err;
      }
    }
    throw new CasConflictError(key);
  }
}

export class SessionRecords extends Records<typeof Session> {
  keyOf(s: { workspaceId: string; id: string }): string {
    return sessionKey(s.workspaceId, s.id);
  }
}

export class RunnerRecords extends Records<typeof Runner> {
  keyOf(r: { poolId: string; id: string }): string {
    return runnerKey(r.poolId, r.id);
  }
}
