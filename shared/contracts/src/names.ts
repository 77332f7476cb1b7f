/**
 * Every stream, bucket and subject name, in one place. Subject builders take
 * already-validated ids (one subject token each).
 */
export const Streams = {
  runner: "RUNNER",
  dispatch: "DISPATCH",
  term: "TERM",
  audit: "AUDIT",
  /** Screen checkpoints: the latest serialized screen of each app as its runner's emulator saw it (one per subject). */
  screens: "SCREENS",
  /** Exec'd processes' output (exec.ts): one subject per process, ending with its exit. */
  exec: "EXEC",
  /** Agents' facts (agents.ts): one subject per session, appended under an expected-last-sequence check. */
  agents: "AGENTS",
} as const;

export const Buckets = {
  sessions: "sessions",
  runners: "runners",
  runnerLeases: "runner-leases",
  environments: "environments",
  idempotency: "idempotency",
  names: "names",
  tokens: "tokens",
  members: "members",
  /** Secret values under `<workspace>.<name>` (a SecretBox envelope); the gateway writes, the scheduler reads by key. */
  secrets: "secrets",
  /** Keys of sealed checkpoints and environment snapshots, under the sha256 of the object ref; the scheduler's alone. */
  sealKeys: "seal-keys",
  /** Workspaces made through the API under their id (WorkspaceRecord); a workspace also exists by its members. */
  workspaces: "workspaces",
  /** Webhooks under `<workspace>.<id>` (WebhookRecord): the gateway writes, the event recorder reads and delivers. */
  webhooks: "webhooks",
  /** Each webhook's recent attempts under `<workspace>.<id>` (WebhookDeliveries): the event recorder writes, the gateway reads. */
  webhookDeliveries: "webhook-deliveries",
  /** Single sign-on in flight (pending logins, handoff codes, spent ID tokens): the gateway's alone; every entry expires (OIDC_BUCKET_TTL_MS). */
  oidc: "oidc",
  /** Runners that joined with a join token (RunnerIdentity under the runner id): the gateway's alone; its auth callout admits their nkeys. */
  runnerIdentities: "runner-identities",
  /** Unspent join tokens (JoinTokenRecord under the sha256 of the token): the gateway's alone; every entry expires (JOIN_TOKEN_MAX_TTL_MS). */
  joinTokens: "join-tokens",
} as const;

/** How long anything in KV `oidc` lives: longer than a login, a handoff and an ID token's acceptance. */
export const OIDC_BUCKET_TTL_MS = 15 * 60_000;

export const ObjectStores = {
  checkpoints: "checkpoints",
  envSnapshots: "env-snapshots",
  /** Workspace archives in transit (push/pull); deleted after each transfer, and expired after TRANSFER_TTL_MS. */
  transfers: "transfers",
} as const;

/** The kinds of sealed objects a runner stores (each kind has a shared legacy store and one store per runner). */
export type RunnerObjectKind = typeof ObjectStores.checkpoints | typeof ObjectStores.envSnapshots;

/**
 * The object store one runner writes its objects of a kind into:
 * `<kind>-runner-<len(pool)>-<pool>-<runner>`. NATS permissions let only that
 * runner write or delete in it; every runner may read it (a takeover restores
 * from another runner's checkpoint) and the scheduler collects it.
 */
export function runnerObjectStore(kind: RunnerObjectKind, poolId: string, runnerId: string): string {
  return `${kind}-${runnerNatsUser(poolId, runnerId)}`;
}

/** The kind of a store holding runners' sealed objects (a runner's own, or the shared legacy store), or undefined. */
export function objectStoreKind(store: string): RunnerObjectKind | undefined {
  for (const kind of [ObjectStores.checkpoints, ObjectStores.envSnapshots] as const) {
    if (store === kind || (store.startsWith(`${kind}-runner-`) && /^[A-Za-z0-9_-]+$/.test(store))) return kind;
  }
  return undefined;
}

/**
 * The stream one runner stores checkpoint chunks in (docs/decisions/0062):
 * only that runner publishes into it, every runner of the fleet reads it by
 * direct get, and only the scheduler's collector removes from it.
 */
export function runnerChunkStream(poolId: string, runnerId: string): string {
  return `chunks-${runnerNatsUser(poolId, runnerId)}`;
}

/**
 * `runnerChunkStream` read back: `chunks-runner-<len(pool)>-<pool>-<runner>` →
 * its pool and runner, or undefined. Ids may contain `-`: the length says
 * where the pool ends. One parse for the runner reading a chunk and the
 * restore script checking a backup.
 */
export function chunkStreamOwner(stream: string): { poolId: string; runnerId: string } | undefined {
  const m = /^chunks-runner-(\d+)-(.+)$/.exec(stream);
  if (!m) return undefined;
  const len = Number(m[1]);
  const rest = m[2] ?? "";
  if (rest.length < len + 2 || rest[len] !== "-") return undefined;
  return { poolId: rest.slice(0, len), runnerId: rest.slice(len + 1) };
}

/** A transfer object left behind by a crashed gateway or runner is removed by the store after this long. */
export const TRANSFER_TTL_MS = 60 * 60 * 1000;

/** The stream that backs a KV bucket; its change feed is what the recorder consumes. */
export function kvStreamName(bucket: string): string {
  return `KV_${bucket}`;
}

export const Subjects = {
  runnerEvents: (poolId: string, runnerId: string) => `paddock.runner.${poolId}.${runnerId}.events`,
  runnerEventsAll: "paddock.runner.>",
  dispatch: (poolId: string, runnerId: string) => `paddock.dispatch.${poolId}.${runnerId}`,
  dispatchAll: "paddock.dispatch.>",
  /**
   * One app's terminal log as written by one runner. The runner is in the
   * subject so NATS permissions confine each runner to its own logs; readers
   * take the app's log across runners with `termOfApp` and keep only chunks
   * whose subject names the runner the record placed that generation on.
   */
  term: (poolId: string, runnerId: string, sessionId: string, app: string) => `paddock.term.${poolId}.${runnerId}.${sessionId}.${app}`,
  /** Filter: one app's log whichever runner wrote it (also the expected-sequence fence subject). */
  termOfApp: (sessionId: string, app: string) => `paddock.term.*.*.${sessionId}.${app}`,
  /** Filter: every log one runner may write (its NATS permission). */
  termOfRunner: (poolId: string, runnerId: string) => `paddock.term.${poolId}.${runnerId}.>`,
  termAll: "paddock.term.>",
  /**
   * The latest screen checkpoint of one app, written by the runner that wrote
   * its log (runner in the subject, as for `term`): a serialized screen and
   * the TERM cursor it stands for (`ScreenCheckpoint`).
   */
  screen: (poolId: string, runnerId: string, sessionId: string, app: string) => `paddock.screen.${poolId}.${runnerId}.${sessionId}.${app}`,
  /** Filter: every checkpoint one runner may write (its NATS permission). */
  screenOfRunner: (poolId: string, runnerId: string) => `paddock.screen.${poolId}.${runnerId}.>`,
  screenAll: "paddock.screen.>",
  /**
   * Controller input for one app, addressed to the runner holding the
   * session: core NATS, not durable (keystrokes are not replayed).
   */
  input: (poolId: string, runnerId: string, sessionId: string, app: string) => `paddock.input.${poolId}.${runnerId}.${sessionId}.${app}`,
  /** Filter: every input one runner may receive (its NATS permission). */
  inputOfRunner: (poolId: string, runnerId: string) => `paddock.input.${poolId}.${runnerId}.>`,
  inputAll: "paddock.input.>",
  /**
   * A new controller's claim on one app, gateway to gateway (core NATS): older
   * controllers attached anywhere see it and are superseded. The claim is also
   * sent to the runner holding the session, on its input subject.
   */
  claim: (sessionId: string, app: string) => `paddock.claim.${sessionId}.${app}`,
  claimAll: "paddock.claim.>",
  /** One exec'd process's output as its runner writes it (runner in the subject, as for `term`). */
  exec: (poolId: string, runnerId: string, sessionId: string, execId: string) => `paddock.exec.${poolId}.${runnerId}.${sessionId}.${execId}`,
  /** Filter: one exec'd process's output whichever runner wrote it. */
  execOf: (sessionId: string, execId: string) => `paddock.exec.*.*.${sessionId}.${execId}`,
  /** Filter: every exec log one runner may write (its NATS permission). */
  execOfRunner: (poolId: string, runnerId: string) => `paddock.exec.${poolId}.${runnerId}.>`,
  execAll: "paddock.exec.>",
  /**
   * One workspace chunk of an incremental checkpoint, in the stream of the
   * runner that stored it (`runnerChunkStream`); `id` names its sealed bytes
   * (the sha256 of their IV and tag, base64url): one content per subject.
   */
  chunk: (poolId: string, runnerId: string, id: string) => `paddock.chunks.${poolId}.${runnerId}.${id}`,
  /** Filter: every chunk one runner may store (its NATS permission, its stream's subjects). */
  chunksOfRunner: (poolId: string, runnerId: string) => `paddock.chunks.${poolId}.${runnerId}.*`,
  /** One session's agent log (declarations, park and resume markers, turns): written by gateways, folded on read. */
  agents: (workspaceId: string, sessionId: string) => `paddock.agents.${workspaceId}.${sessionId}`,
  agentsAll: "paddock.agents.>",
  audit: (workspaceId: string, kind: string, id: string) => `paddock.audit.${workspaceId}.${kind}.${id}`,
  auditWorkspace: (workspaceId: string) => `paddock.audit.${workspaceId}.>`,
  auditAll: "paddock.audit.>",
  /** Gateway → scheduler request/reply; schedulers serve it in one queue group. */
  api: (resource: string, verb: string) => `paddock.api.v1.${resource}.${verb}`,
  /**
   * Runner → scheduler registration, under the runner's own pool/runner
   * tokens: NATS permissions let a runner publish only its own, and the
   * scheduler refuses a body that names another runner than the subject.
   */
  register: (poolId: string, runnerId: string) => `paddock.fleet.v1.register.${poolId}.${runnerId}`,
  registerAll: "paddock.fleet.v1.register.*.*",
  /** Runner → scheduler: is this placement still the session's current one (terminal-log fence resolution). */
  placementCheck: "paddock.fleet.v1.placement",
  /** Runner → scheduler: the sealed secret values of a session it is booting (answered only to that runner's inbox). */
  secrets: "paddock.fleet.v1.secrets",
  /** Runner → scheduler: which of the sessions it has held a while have ended without their teardown reaching it. */
  heldCheck: "paddock.fleet.v1.held",
  /** Gateway heartbeat while clients are attached to a session: core NATS, all schedulers listen. */
  presence: (sessionId: string) => `paddock.presence.${sessionId}`,
  presenceAll: "paddock.presence.*",
  /** Runner → every scheduler, at most once per interval: sessions with terminal output since the last report (`RunnerActivity`). */
  activity: (poolId: string, runnerId: string) => `paddock.activity.${poolId}.${runnerId}`,
  activityAll: "paddock.activity.*.*",
} as const;

/** Header names carried on bus messages. */
export const Headers = {
  placementGeneration: "Paddock-Placement-Generation",
  controllerGeneration: "Paddock-Controller-Generation",
  /** Set on the last TERM message of an app: its exit code ("" when killed by a signal). */
  exitCode: "Paddock-Exit-Code",
  /** On TERM chunks of an app without a TTY: which stream the bytes came from ("stdout" | "stderr"). */
  stream: "Paddock-Stream",
  /** Input message kind: "data" (stdin bytes), "resize" or "claim" (a new controller). */
  inputKind: "Paddock-Input-Kind",
  /**
   * Set on an empty TERM message that resizes the app's terminal at that point
   * of its log ("<cols>x<rows>", see formatTerminalSize): a marker, not output.
   */
  terminalSize: "Paddock-Terminal-Size",
  /** Set on the last message of an exec's output: its body is the exit (`ExecExit`). */
  execExit: "Paddock-Exec-Exit",
} as const;

export const QueueGroups = { scheduler: "scheduler" } as const;

/** The pool and runner of a RUNNER fact subject (`paddock.runner.<pool>.<runner>.events`); undefined when it is not one. */
export function parseRunnerEventsSubject(subject: string): { poolId: string; runnerId: string } | undefined {
  const parts = subject.split(".");
  if (parts.length !== 5 || parts[0] !== "paddock" || parts[1] !== "runner" || parts[4] !== "events") return undefined;
  const [, , poolId, runnerId] = parts as [string, string, string, string];
  return { poolId, runnerId };
}

/** The pool and runner of a registration subject (`paddock.fleet.v1.register.<pool>.<runner>`); undefined when it is not one. */
export function parseRegisterSubject(subject: string): { poolId: string; runnerId: string } | undefined {
  const parts = subject.split(".");
  if (parts.length !== 6 || parts.slice(0, 4).join(".") !== "paddock.fleet.v1.register") return undefined;
  const [, , , , poolId, runnerId] = parts as [string, string, string, string, string, string];
  return { poolId, runnerId };
}

/** The parts of a TERM subject (`paddock.term.<pool>.<runner>.<session>.<app>`); undefined when it is not one. */
export function parseTermSubject(subject: string): { poolId: string; runnerId: string; sessionId: string; app: string } | undefined {
  const parts = subject.split(".");
  if (parts.length !== 6 || parts[0] !== "paddock" || parts[1] !== "term") return undefined;
  const [, , poolId, runnerId, sessionId, app] = parts as [string, string, string, string, string, string];
  return { poolId, runnerId, sessionId, app };
}

/** The parts of a SCREENS subject (`paddock.screen.<pool>.<runner>.<session>.<app>`); undefined when it is not one. */
export function parseScreenSubject(subject: string): { poolId: string; runnerId: string; sessionId: string; app: string } | undefined {
  const parts = subject.split(".");
  if (parts.length !== 6 || parts[0] !== "paddock" || parts[1] !== "screen") return undefined;
  const [, , poolId, runnerId, sessionId, app] = parts as [string, string, string, string, string, string];
  return { poolId, runnerId, sessionId, app };
}

/**
 * The inbox prefix of a NATS user: each principal receives replies only under
 * its own prefix (its NATS permissions allow nothing else), so a responder can
 * tell from a reply subject which principal will read the answer.
 */
export function inboxPrefixOf(user: string): string {
  return `_INBOX_${user}`;
}

/**
 * The NATS user (and DISPATCH durable name) of a runner. Ids may contain `-`,
 * so the pool id is length-prefixed: `runner-7-default-r1` can only be pool
 * `default`, runner `r1`.
 */
export function runnerNatsUser(poolId: string, runnerId: string): string {
  return `runner-${poolId.length}-${poolId}-${runnerId}`;
}
