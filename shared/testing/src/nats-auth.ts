/**
 * Per-service NATS credentials (issue 7, item 4): nats-server `authorization`
 * config giving each service a user with only the subjects it needs, and each
 * runner a user that can publish and consume only its own subjects.
 *
 * The permission lists follow ARCHITECTURE.md (Subjects, Storage) and the
 * JetStream API subjects nats.js 3.x uses (see deploy/nats/README-isolation.md
 * for the derivation and for what subject permissions cannot scope).
 */
import { connect, type ConnectionOptions, type NatsConnection } from "@nats-io/transport-node";
import { Buckets, inboxPrefixOf, kvStreamName, ObjectStores, runnerNatsUser, runnerObjectStore, Streams, Subjects, TUNNEL_OUT_ALL, tunnelOutSubject, WATCH_EVENTS_ALL, watchEventsSubject } from "@paddock/contracts";

export interface RunnerPrincipal {
  poolId: string;
  runnerId: string;
}

export interface NatsAuthOptions {
  runners: RunnerPrincipal[];
  /** Password per user name (`scheduler`, `gateway`, `event-recorder`, `runner-<len(pool)>-<pool>-<runner>`, `provisioner`). */
  passwords: Record<string, string>;
  /**
   * Render `password: $<USER>_PASS` (a nats-server variable, resolved from the
   * environment) instead of the literal passwords: for committed example configs.
   */
  passwordVariables?: boolean;
  /** Also emit the `provisioner` user (full JetStream API, no application subjects). Default true when it has a password. */
  provisioner?: boolean;
  /** Also emit the read-only `observer` user (its own durables on AUDIT). Default true when it has a password. */
  observer?: boolean;
}

export interface Permissions {
  publish: { allow: string[]; deny?: string[] };
  subscribe: { allow: string[]; deny?: string[] };
  /** Lets the user answer requests it received (reply subjects only, once, for a short while). */
  allowResponses?: boolean;
}

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
        // Runner records and leases, read-only: the runners feed (GET /v1/runners?follow=true) watches them.
        ...kvRead(Buckets.runners),
        ...kvRead(Buckets.runnerLeases),
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
    subscribe: { allow: [Subjects.claimAll, Subjects.auditAll, Subjects.agentsAll, WATCH_EVENTS_ALL, TUNNEL_OUT_ALL, inbox(ControlPlaneUsers.gateway)] },
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

/** Every user and its permissions. */
export function natsPrincipals(opts: Pick<NatsAuthOptions, "runners"> & { provisioner?: boolean; observer?: boolean }): Record<string, Permissions> {
  const users: Record<string, Permissions> = {
    [ControlPlaneUsers.scheduler]: schedulerPermissions(opts.runners),
    [ControlPlaneUsers.gateway]: gatewayPermissions(),
    [ControlPlaneUsers.recorder]: recorderPermissions(),
  };
  for (const r of opts.runners) users[runnerUser(r.poolId, r.runnerId)] = runnerPermissions(r, opts.runners);
  if (opts.provisioner) users[ControlPlaneUsers.provisioner] = provisionerPermissions();
  if (opts.observer) users[ObserverUser] = observerPermissions();
  return users;
}

const q = (s: string) => JSON.stringify(s);
const list = (xs: string[]) => `[${xs.map(q).join(", ")}]`;

function renderPermissions(p: Permissions, indent: string): string {
  const lines = [`${indent}publish = { allow = ${list(p.publish.allow)}${p.publish.deny ? `, deny = ${list(p.publish.deny)}` : ""} }`];
  lines.push(`${indent}subscribe = { allow = ${list(p.subscribe.allow)}${p.subscribe.deny ? `, deny = ${list(p.subscribe.deny)}` : ""} }`);
  if (p.allowResponses) lines.push(`${indent}allow_responses = { max: 1, expires: "1m" }`);
  return lines.join("\n");
}

/** The environment variable a rendered example config reads a user's password from: `runner-7-default-r1` → `RUNNER_7_DEFAULT_R1_PASS`. */
export function passwordVariable(user: string): string {
  return `${user.toUpperCase().replace(/[^A-Z0-9]/g, "_")}_PASS`;
}

/** nats-server config text: an `authorization { users = [...] }` block, one user per service and per runner. */
export function natsAuthConfig(opts: NatsAuthOptions): string {
  const has = (user: string) => opts.passwordVariables === true || opts.passwords[user] !== undefined;
  const users = natsPrincipals({ runners: opts.runners, provisioner: opts.provisioner ?? has(ControlPlaneUsers.provisioner), observer: opts.observer ?? has(ObserverUser) });
  const blocks = Object.entries(users).map(([user, perms]) => {
    const pass = opts.passwordVariables ? `$${passwordVariable(user)}` : opts.passwords[user];
    if (pass === undefined) throw new Error(`no password for NATS user ${user}`);
    return [`    {`, `      user: ${q(user)}`, `      password: ${opts.passwordVariables ? pass : q(pass)}`, `      permissions: {`, renderPermissions(perms, "        "), `      }`, `    }`].join("\n");
  });
  return [`authorization {`, `  users = [`, blocks.join("\n"), `  ]`, `}`, ""].join("\n");
}

/**
 * Connects as one of the users above the way services do (shared/bus
 * connectBus): replies under the user's own inbox prefix, the only inbox its
 * permissions let it read.
 */
export function connectAs(servers: string, user: string, pass: string, opts: Partial<ConnectionOptions> = {}): Promise<NatsConnection> {
  return connect({ servers, user, pass, inboxPrefix: inboxPrefixOf(user), ...opts });
}
