/**
 * NATS permissions of every Paddock principal (issue 7, item 4): each service
 * a user with only the subjects it needs, each runner only its own subjects.
 * Defined once here: the test kit renders them into nats-server config
 * (shared/testing natsAuthConfig, deploy/nats/isolated.conf.example) and the
 * gateway's auth callout puts the same runner lists into the user JWTs it
 * issues to joined runners (docs/decisions/0061-runner-join.md).
 *
 * The lists follow ARCHITECTURE.md (Subjects, Storage) and the JetStream API
 * subjects nats.js 3.x uses (see deploy/nats/README-isolation.md for the
 * derivation and for what subject permissions cannot scope).
 */
import { Buckets, inboxPrefixOf, kvStreamName, ObjectStores, runnerChunkStream, runnerNatsUser, runnerObjectStore, Streams, Subjects } from "./names.ts";
import { TUNNEL_OUT_ALL, tunnelOutSubject } from "./ports.ts";
import { WATCH_EVENTS_ALL, watchEventsSubject } from "./workspace.ts";

export interface RunnerPrincipal {
  poolId: string;
  runnerId: string;
}

export interface Permissions {
  publish: { allow: string[]; deny?: string[] };
  subscribe: { allow: string[]; deny?: string[] };
  /** Lets the user answer requests it received (reply subjects only, once, for a short while). */
  allowResponses?: boolean;
}

/** Where nats-server asks its auth callout to authorize a connection (server config mode). */
export const AUTH_CALLOUT_SUBJECT = "$SYS.REQ.USER.AUTH";

export const ControlPlaneUsers = { scheduler: "scheduler", gateway: "gateway", recorder: "event-recorder", provisioner: "provisioner" } as const;

/** The user (and DISPATCH durable) name of a runner. */
export const runnerUser = runnerNatsUser;

const API = "$JS.API";
const kvStream = (b: string) => kvStreamName(b);
const objStream = (o: string) => `OBJ_${o}`;
const kvSubject = (b: string, key = ">") => `$KV.${b}.${key}`;

const allStreams = [
  ...Object.values(Streams),
  ...Object.values(Buckets).map(kvStream),
  ...Object.values(ObjectStores).map(objStream),
];

/**
 * What `provision()` calls (every service runs it at start): JetStream account
 * info, create (idempotent when the config is identical) and info of exactly
 * the Paddock streams. `withUpdate` adds STREAM.UPDATE, needed only when a
 * stream drifted (a different replica count or retention); runners never get it.
 */
function provisioning(withUpdate: boolean): string[] {
  return [
    `${API}.INFO`,
    ...allStreams.flatMap((s) => [`${API}.STREAM.CREATE.${s}`, `${API}.STREAM.INFO.${s}`, ...(withUpdate ? [`${API}.STREAM.UPDATE.${s}`] : [])]),
  ];
}

/** Read a KV bucket: direct gets (per key or by sequence), and watches (ordered consumers). */
function kvRead(bucket: string): string[] {
  const s = kvStream(bucket);
  return [
    `${API}.DIRECT.GET.${s}`,
    `${API}.DIRECT.GET.${s}.>`,
    `${API}.STREAM.MSG.GET.${s}`,
    `${API}.CONSUMER.CREATE.${s}`,
    `${API}.CONSUMER.CREATE.${s}.>`,
    `${API}.CONSUMER.INFO.${s}.>`,
    `${API}.CONSUMER.DELETE.${s}.>`,
    `${API}.CONSUMER.MSG.NEXT.${s}.>`,
  ];
}

/** Get KV records by key only: no consumers, so no listing or watching. */
function kvGet(bucket: string): string[] {
  const s = kvStream(bucket);
  return [`${API}.DIRECT.GET.${s}.${kvSubject(bucket)}`, `${API}.STREAM.MSG.GET.${s}`];
}

/** Read, write (put/create/update/delete) a KV bucket. */
function kvReadWrite(bucket: string): string[] {
  return [...kvRead(bucket), kvSubject(bucket)];
}

/** A durable pull consumer by name: create/update it (optionally only with one filter), read it, pull, ack. */
function durable(stream: string, name: string, filter?: string): string[] {
  return [
    ...(filter ? [`${API}.CONSUMER.CREATE.${stream}.${name}.${filter}`] : [`${API}.CONSUMER.CREATE.${stream}.${name}`, `${API}.CONSUMER.CREATE.${stream}.${name}.>`, `${API}.CONSUMER.DURABLE.CREATE.${stream}.${name}`]),
    `${API}.CONSUMER.INFO.${stream}.${name}`,
    `${API}.CONSUMER.MSG.NEXT.${stream}.${name}`,
    `$JS.ACK.${stream}.${name}.>`,
  ];
}

/** Read a stream without a durable: direct gets, ordered (ephemeral) consumers. */
function streamRead(stream: string): string[] {
  return [
    `${API}.DIRECT.GET.${stream}`,
    `${API}.DIRECT.GET.${stream}.>`,
    `${API}.STREAM.MSG.GET.${stream}`,
    `${API}.CONSUMER.CREATE.${stream}`,
    `${API}.CONSUMER.CREATE.${stream}.>`,
    `${API}.CONSUMER.INFO.${stream}.>`,
    `${API}.CONSUMER.DELETE.${stream}.>`,
    `${API}.CONSUMER.MSG.NEXT.${stream}.>`,
  ];
}

/** Put, get and delete objects of an object store (chunks + meta subjects, purge of replaced chunks, ordered push consumer). */
function objectStore(store: string): string[] {
  const s = objStream(store);
  return [`$O.${store}.>`, `${API}.STREAM.PURGE.${s}`, ...streamRead(s), "$JS.FC.>"];
}

/** Read an object store only (open, get, list, watch): no `$O.<store>.>` publish and no purge, so nothing can be added, replaced or deleted. */
function objectStoreRead(store: string): string[] {
  const s = objStream(store);
  return [`${API}.STREAM.INFO.${s}`, ...streamRead(s), "$JS.FC.>"];
}

/** Each runner's own checkpoint and environment-snapshot stores (ARCHITECTURE.md, Sealed objects). */
const runnerStores = (r: RunnerPrincipal): string[] => [ObjectStores.checkpoints, ObjectStores.envSnapshots].map((kind) => runnerObjectStore(kind, r.poolId, r.runnerId));

/** Read a runner's checkpoint chunks: direct gets by subject only (docs/decisions/0062). */
function chunkRead(r: RunnerPrincipal): string[] {
  const s = runnerChunkStream(r.poolId, r.runnerId);
  return [`${API}.DIRECT.GET.${s}`, `${API}.DIRECT.GET.${s}.>`];
}

/** Replies a user may receive: only under its own inbox prefix (shared/bus connects with it). */
const inbox = (user: string) => `${inboxPrefixOf(user)}.>`;

export function schedulerPermissions(runners: RunnerPrincipal[] = []): Permissions {
  const owned = [Buckets.sessions, Buckets.runners, Buckets.names, Buckets.idempotency, Buckets.tokens, Buckets.environments, Buckets.sealKeys];
  return {
    publish: {
      allow: [
        ...provisioning(true),
        ...owned.flatMap(kvReadWrite),
        ...kvRead(Buckets.runnerLeases),
        ...durable(Streams.runner, "scheduler"),
        Subjects.dispatchAll,
        // Secret records by key (no listing), released only to the runner a session is placed on (FleetRpc.sessionSecrets).
        ...kvGet(Buckets.secrets),
        ...objectStore(ObjectStores.checkpoints),
        ...objectStore(ObjectStores.envSnapshots),
        // Every runner's own stores: collected here (never created: only the runner makes its own).
        ...runners.flatMap(runnerStores).flatMap((store) => [`${API}.STREAM.INFO.${objStream(store)}`, ...objectStore(store)]),
        // Every runner's chunk stream: listed, read and collected (purged by subject), never written.
        ...runners.flatMap((r) => [`${API}.STREAM.INFO.${runnerChunkStream(r.poolId, r.runnerId)}`, `${API}.STREAM.PURGE.${runnerChunkStream(r.poolId, r.runnerId)}`, ...chunkRead(r)]),
      ],
    },
    subscribe: { allow: ["paddock.api.v1.>", Subjects.registerAll, Subjects.placementCheck, Subjects.secrets, Subjects.heldCheck, Subjects.presenceAll, Subjects.activityAll, inbox(ControlPlaneUsers.scheduler)] },
    allowResponses: true,
  };
}

export function gatewayPermissions(): Permissions {
  return {
    publish: {
      allow: [
        ...provisioning(true),
        ...kvReadWrite(Buckets.tokens),
        ...kvReadWrite(Buckets.members),
        // Secret store: put, purge, key listing (names) and the existence check of DELETE.
        ...kvReadWrite(Buckets.secrets),
        // Workspaces made through the API (members are in KV members).
        ...kvReadWrite(Buckets.workspaces),
        // Webhooks: their records (the signing secret sealed), and their recent attempts by key.
        ...kvReadWrite(Buckets.webhooks),
        ...kvGet(Buckets.webhookDeliveries),
        // Single sign-on in flight: pending logins, handoff codes, spent ID tokens.
        ...kvReadWrite(Buckets.oidc),
        // Joined runners and unspent join tokens (docs/decisions/0061-runner-join.md).
        ...kvReadWrite(Buckets.runnerIdentities),
        ...kvReadWrite(Buckets.joinTokens),
        // Runner records and leases, read-only: the runners feed (GET /v1/runners?follow=true) watches them.
        ...kvRead(Buckets.runners),
        ...kvRead(Buckets.runnerLeases),
        // Session records, read from the stream leader (decision 0071); only the scheduler writes them.
        `${API}.STREAM.MSG.GET.${kvStream(Buckets.sessions)}`,
        ...streamRead(Streams.term),
        ...streamRead(Streams.audit),
        ...streamRead(Streams.exec),
        // Agents' facts: appended (expected-last-sequence checked) and folded by any gateway.
        ...streamRead(Streams.agents),
        Subjects.agentsAll,
        // Screen checkpoints: the latest per subject, by direct get only.
        `${API}.DIRECT.GET.${Streams.screens}.>`,
        "paddock.api.v1.>",
        // Input goes to whichever runner holds the session; claims go to every gateway.
        Subjects.inputAll,
        Subjects.claimAll,
        "paddock.presence.>",
        "paddock.workspace.>",
        ...objectStore(ObjectStores.transfers),
      ],
    },
    // File watch batches, from whichever runner holds the watched session (never stored).
    // Agents' appends wake long polls on a session's agent log (core subscription, nothing held on the server).
    // The auth callout (where the server has one): answered once per request through allow_responses.
    subscribe: { allow: [Subjects.claimAll, Subjects.auditAll, Subjects.agentsAll, WATCH_EVENTS_ALL, TUNNEL_OUT_ALL, AUTH_CALLOUT_SUBJECT, inbox(ControlPlaneUsers.gateway)] },
    allowResponses: true,
  };
}

export function recorderPermissions(): Permissions {
  const feeds = [Buckets.sessions, Buckets.environments, Buckets.runners];
  return {
    publish: {
      allow: [
        ...provisioning(true),
        ...feeds.flatMap((b) => durable(kvStream(b), "event-recorder")),
        ...durable(Streams.agents, "event-recorder"),
        `${API}.DIRECT.GET.${kvStream(Buckets.runners)}`,
        `${API}.DIRECT.GET.${kvStream(Buckets.runners)}.>`,
        `${API}.DIRECT.GET.${Streams.audit}`,
        `${API}.DIRECT.GET.${Streams.audit}.>`,
        Subjects.auditAll,
        // Webhooks: read their records, keep their attempts, and one durable on AUDIT per webhook (made, fed, removed with it).
        ...kvRead(Buckets.webhooks),
        ...kvReadWrite(Buckets.webhookDeliveries),
        `${API}.CONSUMER.CREATE.${Streams.audit}.*`,
        `${API}.CONSUMER.CREATE.${Streams.audit}.*.>`,
        `${API}.CONSUMER.INFO.${Streams.audit}.*`,
        `${API}.CONSUMER.DELETE.${Streams.audit}.*`,
        `${API}.CONSUMER.MSG.NEXT.${Streams.audit}.*`,
        `$JS.ACK.${Streams.audit}.*.>`,
      ],
    },
    subscribe: { allow: [inbox(ControlPlaneUsers.recorder)] },
  };
}

export function runnerPermissions({ poolId, runnerId }: RunnerPrincipal, peers: RunnerPrincipal[] = []): Permissions {
  const name = runnerUser(poolId, runnerId);
  const key = `${poolId}.${runnerId}`;
  return {
    publish: {
      allow: [
        ...provisioning(false),
        Subjects.runnerEvents(poolId, runnerId),
        kvSubject(Buckets.runnerLeases, key),
        // Its own runner record, by key only (fence check after each renewal; the runner opens the bucket with allow_direct).
        `${API}.DIRECT.GET.${kvStream(Buckets.runners)}.${kvSubject(Buckets.runners, key)}`,
        // Its own DISPATCH durable, creatable only with its own filter subject.
        ...durable(Streams.dispatch, name, Subjects.dispatch(poolId, runnerId)),
        // Registration under its own pool/runner tokens only: the subject is its identity (the scheduler refuses a body naming another runner).
        Subjects.register(poolId, runnerId),
        // Fence resolution, boot secrets and held checks: answered from the session record, secrets and held checks only to this runner's inbox.
        Subjects.placementCheck,
        Subjects.secrets,
        Subjects.heldCheck,
        // Terminal logs: only under its own pool/runner tokens, and it reads back only those (last chunk per subject).
        Subjects.termOfRunner(poolId, runnerId),
        `${API}.DIRECT.GET.${Streams.term}.${Subjects.termOfRunner(poolId, runnerId)}`,
        // Exec'd processes' output: only under its own pool/runner tokens (written, never read back).
        Subjects.execOfRunner(poolId, runnerId),
        // File watch batches under its own pool/runner tokens only (the gateway subscribes; core NATS, never stored).
        watchEventsSubject(poolId, runnerId, ">"),
        // Previews' tunnel output, under its own pool/runner tokens only (the gateway subscribes; core NATS).
        tunnelOutSubject(poolId, runnerId, ">"),
        // Screen checkpoints of its own apps only (written, never read back).
        Subjects.screenOfRunner(poolId, runnerId),
        // Activity reports (idle policy) under its own pool/runner only.
        Subjects.activity(poolId, runnerId),
        // Sealed checkpoints and environment snapshots: written (and deletable) only in its own stores;
        // any other runner's, and the shared legacy stores, are read-only (a takeover restores from them).
        ...runnerStores({ poolId, runnerId }).flatMap((store) => [`${API}.STREAM.CREATE.${objStream(store)}`, `${API}.STREAM.INFO.${objStream(store)}`, ...objectStore(store)]),
        ...peers.filter((p) => p.poolId !== poolId || p.runnerId !== runnerId).flatMap(runnerStores).flatMap(objectStoreRead),
        ...objectStoreRead(ObjectStores.checkpoints),
        ...objectStoreRead(ObjectStores.envSnapshots),
        ...objectStore(ObjectStores.transfers),
        // Checkpoint chunks: stored only in its own stream (never purged: the scheduler collects), read from any runner's.
        `${API}.STREAM.CREATE.${runnerChunkStream(poolId, runnerId)}`,
        `${API}.STREAM.INFO.${runnerChunkStream(poolId, runnerId)}`,
        Subjects.chunksOfRunner(poolId, runnerId),
        ...chunkRead({ poolId, runnerId }),
        ...peers.filter((p) => p.poolId !== poolId || p.runnerId !== runnerId).flatMap(chunkRead),
      ],
      deny: [
        "$KV.sessions.>",
        kvSubject(Buckets.secrets),
        Subjects.auditAll,
        `${API}.STREAM.UPDATE.>`,
        `${API}.STREAM.DELETE.>`,
        `${API}.STREAM.PURGE.${Streams.audit}`,
        Subjects.dispatchAll,
      ],
    },
    subscribe: {
      allow: [Subjects.inputOfRunner(poolId, runnerId), `paddock.workspace.${poolId}.${runnerId}.>`, inbox(name)],
    },
    allowResponses: true,
  };
}

/**
 * The provisioner / storage admin: the whole JetStream API and direct KV and
 * object writes, no application subjects. Run once before the services (and
 * by operators); no service connects as it.
 */
export function provisionerPermissions(): Permissions {
  return { publish: { allow: [`${API}.>`, "$KV.>", "$O.>", "$JS.ACK.>", "$JS.FC.>"] }, subscribe: { allow: [inbox(ControlPlaneUsers.provisioner)] } };
}

/** The read-only principal of audit observers (billing, dashboards; docs/audit.md). */
export const ObserverUser = "observer";

/**
 * An observer reads AUDIT through durable consumers it names and nothing
 * else: no publish outside the JetStream API of AUDIT's consumers (create,
 * info, pull, ack), no KV, no other stream, no deletes, no subscriptions but
 * its own inbox.
 */
export function observerPermissions(): Permissions {
  return {
    publish: { allow: [`${API}.INFO`, `${API}.STREAM.INFO.${Streams.audit}`, ...durable(Streams.audit, "*")] },
    subscribe: { allow: [inbox(ObserverUser)] },
  };
}
