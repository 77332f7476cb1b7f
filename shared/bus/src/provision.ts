import {
  DiscardPolicy,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type JetStreamManager,
  type StreamConfig,
} from "@nats-io/jetstream";
import { Kvm, type KvOptions } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import { jserrors } from "@nats-io/jetstream/internal";
import { NoRespondersError, RequestError, TimeoutError, type NatsConnection } from "@nats-io/transport-node";
import { Buckets, kvStreamName, MAX_AGENT_FACTS_PER_SESSION, MAX_SCREEN_CHECKPOINT_BYTES, JOIN_TOKEN_MAX_TTL_MS, OIDC_BUCKET_TTL_MS, ObjectStores, runnerObjectStore, runnerChunkStream, MANIFEST_CHUNK_BYTES, Streams, Subjects, TRANSFER_TTL_MS } from "@paddock/contracts";
import { isStreamNameInUse, isStreamNotFound } from "./errors.ts";

const NS_PER_MS = 1_000_000;

/**
 * Consumers a stream may hold. nats-server 2.15 caps a stream that names no
 * limit at 1,000 consumers (and no longer accepts "unlimited"), which a
 * fleet outgrows: DISPATCH holds one durable per runner, TERM one per attached
 * terminal, EXEC one per reader of a process's output, AUDIT one per events
 * stream. This bound still stops a runaway client long before the server
 * suffers, with room for 5,000 runners and tens of thousands of attachments.
 */
export const MAX_CONSUMERS_PER_STREAM = 100_000;
const DAY_MS = 24 * 60 * 60 * 1000;

export interface ProvisionOptions {
  /** Replica count of every stream, bucket and object store. */
  replicas: number;
  /** How long audit events are kept. */
  auditMaxAgeMs?: number;
  /** Most terminal chunks kept per session app (each at most 32 KiB). */
  termMaxMsgsPerSubject?: number;
  /** How long terminal chunks (and screen checkpoints) are kept. */
  termMaxAgeMs?: number;
  /** Bytes of screen checkpoints kept in all (one per app; the oldest go first). */
  screensMaxBytes?: number;
  /** Bytes of exec'd processes' output kept in all (the oldest go first). */
  execMaxBytes?: number;
  /** Per-key TTL marker lifetime of the runner lease bucket. */
  leaseMarkerTtlMs?: number;
  /** A runner provisioning: also its own checkpoint and environment-snapshot stores. */
  runner?: { poolId: string; runnerId: string };
}

/** The stream configs, derived from the options; exported so tests can assert them. */
export function streamConfigs(opts: ProvisionOptions): Array<Partial<StreamConfig> & { name: string; subjects: string[] }> {
  const base = {
    num_replicas: opts.replicas,
    storage: StorageType.File,
    retention: RetentionPolicy.Limits,
    discard: DiscardPolicy.Old,
    allow_direct: true,
    max_consumers: MAX_CONSUMERS_PER_STREAM,
  };
  return [
    { ...base, name: Streams.runner, subjects: [Subjects.runnerEventsAll], max_age: 7 * DAY_MS * NS_PER_MS, duplicate_window: 2 * 60_000 * NS_PER_MS },
    { ...base, name: Streams.dispatch, subjects: [Subjects.dispatchAll], max_age: DAY_MS * NS_PER_MS, duplicate_window: 10 * 60_000 * NS_PER_MS },
    {
      ...base,
      name: Streams.term,
      subjects: [Subjects.termAll],
      // 10,240 chunks of at most 32 KiB: 320 MiB per session app.
      max_msgs_per_subject: opts.termMaxMsgsPerSubject ?? 10_240,
      max_age: (opts.termMaxAgeMs ?? 7 * DAY_MS) * NS_PER_MS,
      duplicate_window: 60_000 * NS_PER_MS,
    },
    {
      ...base,
      name: Streams.screens,
      subjects: [Subjects.screenAll],
      // Only the latest checkpoint of an app counts; older ones go with the TERM log's age, and
      // the total is bounded (a missing checkpoint only makes a screen snapshot replay the log).
      max_msgs_per_subject: 1,
      max_age: (opts.termMaxAgeMs ?? 7 * DAY_MS) * NS_PER_MS,
      max_bytes: opts.screensMaxBytes ?? 1024 * 1024 * 1024,
      // The body is bounded by the runner; headers and JSON framing fit in the slack.
      max_msg_size: MAX_SCREEN_CHECKPOINT_BYTES + 16 * 1024,
    },
    {
      ...base,
      name: Streams.exec,
      subjects: [Subjects.execAll],
      // 4,096 chunks of at most 256 KiB (EXEC_CHUNK_MAX_BYTES): up to 1 GiB of one process's
      // output written at full speed, 4,096 writes of a slow one. An attached reader holds the runner to a
      // window far below it; a background process's oldest output goes first, and the 8 GiB in all bound it.
      max_msgs_per_subject: 4_096,
      max_age: DAY_MS * NS_PER_MS,
      max_bytes: opts.execMaxBytes ?? 8 * 1024 * 1024 * 1024,
      // A runner retrying a publish whose ack it lost sends the same message id.
      duplicate_window: 60_000 * NS_PER_MS,
    },
    {
      ...base,
      name: Streams.agents,
      subjects: [Subjects.agentsAll],
      // Each session's log is folded whole on read, so its oldest facts (the declarations) must never
      // be dropped to make room: past the bound the server refuses the append (the gateway says so first).
      discard: DiscardPolicy.New,
      discard_new_per_subject: true,
      max_msgs_per_subject: MAX_AGENT_FACTS_PER_SESSION,
      max_age: 30 * DAY_MS * NS_PER_MS,
      // A gateway retrying an append whose ack it lost sends the same message id (the fact's id).
      duplicate_window: 2 * 60_000 * NS_PER_MS,
    },
    {
      ...base,
      name: Streams.audit,
      subjects: [Subjects.auditAll],
      max_age: (opts.auditMaxAgeMs ?? 30 * DAY_MS) * NS_PER_MS,
      // A recorder that crashed after publishing but before acking republishes
      // with the same message id; the window must outlast any redelivery (and
      // the server requires it to be no longer than max_age).
      duplicate_window: Math.min(60 * 60_000, opts.auditMaxAgeMs ?? 30 * DAY_MS) * NS_PER_MS,
    },
  ];
}

/**
 * Revisions kept per key of a change-feed bucket. The KV client caps the
 * history it will create with at 64; the server does not, so the stream is
 * raised to this after creation. It bounds how far behind one record a
 * recorder may fall without losing a revision (see ARCHITECTURE.md, Audit).
 */
export const FEED_HISTORY = { [Buckets.sessions]: 1024, [Buckets.environments]: 256, [Buckets.runners]: 256 } as Record<string, number>;

function bucketOptions(opts: ProvisionOptions): Array<[string, Partial<KvOptions>]> {
  const r = { replicas: opts.replicas };
  return [
    // The change feed of `sessions` is the audit outbox: keep deep history so
    // a recorder that is behind still sees every revision (see ARCHITECTURE.md).
    [Buckets.sessions, { ...r, history: 64 }],
    [Buckets.runners, { ...r, history: 16 }],
    [Buckets.runnerLeases, { ...r, history: 1, markerTTL: opts.leaseMarkerTtlMs ?? 60_000 }],
    [Buckets.environments, { ...r, history: 8 }],
    [Buckets.idempotency, { ...r, history: 1 }],
    [Buckets.names, { ...r, history: 1 }],
    [Buckets.tokens, { ...r, history: 1 }],
    [Buckets.members, { ...r, history: 1 }],
    // One revision: a replaced or deleted value leaves no history behind.
    [Buckets.secrets, { ...r, history: 1 }],
    [Buckets.sealKeys, { ...r, history: 1 }],
    [Buckets.workspaces, { ...r, history: 1 }],
    [Buckets.webhooks, { ...r, history: 1 }],
    [Buckets.webhookDeliveries, { ...r, history: 1 }],
    // Sign-on in flight: nothing in it outlives the bucket's TTL, used or not (abandoned logins too).
    [Buckets.oidc, { ...r, history: 1, ttl: OIDC_BUCKET_TTL_MS }],
    // Identities stay (a revoked one too: its revokedAt is what the callout refuses).
    [Buckets.runnerIdentities, { ...r, history: 1 }],
    // A join token is spent by deleting it; one never spent expires with the bucket's TTL.
    [Buckets.joinTokens, { ...r, history: 1, ttl: JOIN_TOKEN_MAX_TTL_MS }],
  ];
}

/** Retention fields a caller only changes on an existing stream when it set the option. */
function retentionFieldsSet(opts: ProvisionOptions): Record<string, Array<keyof StreamConfig>> {
  return {
    [Streams.audit]: opts.auditMaxAgeMs === undefined ? [] : ["max_age", "duplicate_window"],
    [Streams.term]: [
      ...(opts.termMaxMsgsPerSubject === undefined ? [] : (["max_msgs_per_subject"] as const)),
      ...(opts.termMaxAgeMs === undefined ? [] : (["max_age"] as const)),
    ],
    [Streams.screens]: [
      ...(opts.termMaxAgeMs === undefined ? [] : (["max_age"] as const)),
      ...(opts.screensMaxBytes === undefined ? [] : (["max_bytes"] as const)),
    ],
  };
}

/**
 * A runner's chunk stream (docs/decisions/0062): one message per subject (a
 * chunk's id names its sealed bytes), never replaced, read by direct get from
 * any runner, removed from only by the scheduler's collector.
 */
export function chunkStreamConfig(poolId: string, runnerId: string, replicas: number): Partial<StreamConfig> & { name: string } {
  return {
    name: runnerChunkStream(poolId, runnerId),
    subjects: [Subjects.chunksOfRunner(poolId, runnerId)],
    storage: StorageType.File,
    num_replicas: replicas,
    max_msgs_per_subject: 1,
    // A chunk, once stored, is never replaced (not even by its runner): manifests on other runners name it.
    discard: DiscardPolicy.New,
    discard_new_per_subject: true,
    allow_direct: true,
    max_msg_size: 2 * MANIFEST_CHUNK_BYTES,
  };
}

const RETENTION_FIELDS: Array<keyof StreamConfig> = ["max_age", "duplicate_window", "max_msgs_per_subject", "max_bytes"];

async function ensureStream(
  jsm: JetStreamManager,
  cfg: Partial<StreamConfig> & { name: string },
  explicit: Array<keyof StreamConfig>,
): Promise<void> {
  try {
    await jsm.streams.add(cfg);
  } catch (err) {
    // 10058: exists with a different configuration. Update the structural
    // fields, and retention only where this caller set it, so services that
    // do not own a retention setting never fight over it. Several replicas
    // may race here; each update converges on the same config.
    if (!isStreamNameInUse(err)) throw err;
    const existing = (await streamInfo(jsm, cfg.name)).config;
    const { name, ...rest } = cfg;
    const next: Partial<StreamConfig> = { ...rest };
    for (const field of RETENTION_FIELDS) {
      if (!explicit.includes(field)) (next as Record<string, unknown>)[field] = existing[field];
    }
    // Nothing this caller owns differs: leave the stream alone (a caller without
    // update permission, such as a runner, must not need it).
    const differs = Object.entries(next).some(([k, v]) => JSON.stringify(existing[k as keyof StreamConfig]) !== JSON.stringify(v));
    if (differs) await jsm.streams.update(name, next);
  }
}

/**
 * Stream info right after the stream was created (by this caller or a racing
 * replica). On a cluster the create is acknowledged before the new stream's
 * RAFT group has a leader to answer info, which then says "stream not found"
 * for a moment (found by `pnpm chaos`: services started together on a fresh
 * 3-node cluster exited in provision); retried for a few seconds.
 */
async function streamInfo(jsm: JetStreamManager, name: string): Promise<Awaited<ReturnType<JetStreamManager["streams"]["info"]>>> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await jsm.streams.info(name);
    } catch (err) {
      if (!isStreamNotFound(err) || attempt >= 50) throw err;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

async function ensureBucket(nc: NatsConnection, jsm: JetStreamManager, name: string, opts: Partial<KvOptions>): Promise<void> {
  try {
    await new Kvm(nc).create(name, opts);
  } catch (err) {
    // 10058: between this client's "not found" and its add, a racing replica made
    // the bucket and raised its history past what the KV client asks for (seen
    // once in the concurrent provision test); the check below converges.
    if (!isStreamNameInUse(err)) throw err;
  }
  const info = await streamInfo(jsm, kvStreamName(name));
  const wantHistory = FEED_HISTORY[name] ?? opts.history ?? 1;
  if (info.config.num_replicas !== opts.replicas || info.config.max_msgs_per_subject !== wantHistory) {
    await jsm.streams.update(kvStreamName(name), {
      num_replicas: opts.replicas ?? 1,
      max_msgs_per_subject: wantHistory,
    });
  }
}

/** Errors of a JetStream API that is slow or electing leaders (a fresh or busy cluster): worth another try. */
const TRANSIENT = [TimeoutError, NoRespondersError, jserrors.JetStreamNotEnabled, RequestError] as const;

/**
 * Creates or updates every stream, bucket and object store. Safe to run from
 * every service at start, concurrently: each step converges on the same config.
 * A step that times out (R3 assets on a fresh cluster under load) is retried
 * from the start, a few times with backoff, instead of failing the service's
 * start (found by `pnpm chaos`: services started on a fresh 3-node cluster
 * exited in provision).
 */
export async function provision(nc: NatsConnection, opts: ProvisionOptions): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await provisionOnce(nc, opts);
      return;
    } catch (err) {
      if (!TRANSIENT.some((cls) => err instanceof cls) || attempt >= 5) throw err;
      await new Promise((resolve) => setTimeout(resolve, 250 * 2 ** attempt));
    }
  }
}

async function provisionOnce(nc: NatsConnection, opts: ProvisionOptions): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const explicit = retentionFieldsSet(opts);
  for (const cfg of streamConfigs(opts)) await ensureStream(jsm, cfg, explicit[cfg.name] ?? []);
  for (const [name, kvOpts] of bucketOptions(opts)) await ensureBucket(nc, jsm, name, kvOpts);
  const objm = new Objm(nc);
  for (const name of Object.values(ObjectStores)) {
    // Transfers are deleted after each use; the TTL only sweeps what a crash left behind.
    const ttl = name === ObjectStores.transfers ? { ttl: TRANSFER_TTL_MS * NS_PER_MS } : {};
    await objm.create(name, { replicas: opts.replicas, ...ttl });
  }
  // A runner's own stores, which only it may create and write (ARCHITECTURE.md, Sealed objects).
  if (opts.runner) {
    for (const kind of [ObjectStores.checkpoints, ObjectStores.envSnapshots] as const) {
      await objm.create(runnerObjectStore(kind, opts.runner.poolId, opts.runner.runnerId), { replicas: opts.replicas });
    }
    await ensureStream(jsm, chunkStreamConfig(opts.runner.poolId, opts.runner.runnerId, opts.replicas), []);
  }
}
