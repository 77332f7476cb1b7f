/**
 * Every stream, bucket and subject name, in one place. Subject builders take
 * already-validated ids (one subject token each).
 */
export const Streams = {
  runner: "RUNNER",
  dispatch: "DISPATCH",
  term: "TERM",
  audit: "AUDIT",
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
  /** Secret values under `<workspace>.<name>` (a SecretBox envelope); gateway writes, runners read by key. */
  secrets: "secrets",
} as const;

export const ObjectStores = {
  checkpoints: "checkpoints",
  envSnapshots: "env-snapshots",
  /** Workspace archives in transit (push/pull); deleted after each transfer, and expired after TRANSFER_TTL_MS. */
  transfers: "transfers",
} as const;

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
  term: (sessionId: string, app: string) => `paddock.term.${sessionId}.${app}`,
  termAll: "paddock.term.>",
  /** Controller input for one app: core NATS, not durable (keystrokes are not replayed). */
  input: (sessionId: string, app: string) => `paddock.input.${sessionId}.${app}`,
  audit: (workspaceId: string, kind: string, id: string) => `paddock.audit.${workspaceId}.${kind}.${id}`,
  auditWorkspace: (workspaceId: string) => `paddock.audit.${workspaceId}.>`,
  auditAll: "paddock.audit.>",
  /** Gateway → scheduler request/reply; schedulers serve it in one queue group. */
  api: (resource: string, verb: string) => `paddock.api.v1.${resource}.${verb}`,
  register: "paddock.fleet.v1.register",
  /** Gateway heartbeat while clients are attached to a session: core NATS, all schedulers listen. */
  presence: (sessionId: string) => `paddock.presence.${sessionId}`,
  presenceAll: "paddock.presence.*",
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
} as const;

export const QueueGroups = { scheduler: "scheduler" } as const;
