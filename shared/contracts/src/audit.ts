import { z } from "zod";
import { EpochMs, Generation, Id } from "./ids.ts";

/**
 * Why the scheduler moved a session by itself: it was idle, its lifetime
 * ended, or its runner is draining (the session is moved to another runner:
 * cold-suspended, then resumed elsewhere).
 */
export const PolicyReason = z.enum(["idle", "lifetime", "drain"]);
export type PolicyReason = z.infer<typeof PolicyReason>;

/**
 * The audit action vocabulary: the control contract's operation verbs plus the
 * lifecycle verbs a fixed-field event needs, since an event carries no state
 * field (see ARCHITECTURE.md, "Departures").
 */
export const AuditAction = {
  create: "create",
  place: "place",
  start: "start",
  exit: "exit",
  fail: "fail",
  cancel: "cancel",
  delete: "delete",
  suspend: "suspend",
  resume: "resume",
  snapshot: "snapshot",
  attach: "attach",
  supersede: "supersede",
  push: "push",
  pull: "pull",
  /** A file written or removed through the files routes (no path, no content: fixed fields only). */
  "file.write": "file.write",
  "file.delete": "file.delete",
  /** A command exec'd in the session (no command text, no output: fixed fields only). */
  exec: "exec",
  update: "update",
  recycle: "recycle",
  /** An agent inside the session declared itself, was parked, was resumed by a successor, or started or ended a turn (agents.ts). */
  "agent.declare": "agent.declare",
  "agent.park": "agent.park",
  "agent.resume": "agent.resume",
  "agent.turn": "agent.turn",
  restart: "restart",
  "run.started": "run.started",
  "run.completed": "run.completed",
  "run.failed": "run.failed",
  timeout: "timeout",
  expire: "expire",
  evict: "evict",
  /** A generation's usage reported after the record had already ended (teardown after a delete). */
  usage: "usage",
  register: "register",
  lose: "lose",
  fence: "fence",
} as const;
export type AuditAction = (typeof AuditAction)[keyof typeof AuditAction];
export const AuditActionSchema = z.enum(AuditAction);

export const ResourceKind = z.enum(["session", "environment", "runner"]);
export type ResourceKind = z.infer<typeof ResourceKind>;

export const Usage = z
  .object({
    cpuTimeSeconds: z.number().nonnegative(),
    memoryByteSeconds: z.number().int().nonnegative(),
    storageBytes: z.number().int().nonnegative(),
    networkBytes: z.number().int().nonnegative(),
    agentTokenCount: z.number().int().nonnegative(),
  })
  .strict();
export type Usage = z.infer<typeof Usage>;

export const ZERO_USAGE: Usage = {
  cpuTimeSeconds: 0,
  memoryByteSeconds: 0,
  storageBytes: 0,
  networkBytes: 0,
  agentTokenCount: 0,
};

export const RunTrigger = z.enum(["initial", "watch", "manual", "resume"]);
export type RunTrigger = z.infer<typeof RunTrigger>;

/** Which app generation a run fact (run.started, run.completed, run.failed) is about; copied onto its audit event. */
export const RunRef = z
  .object({
    app: Id,
    generation: z.number().int().positive(),
    trigger: RunTrigger,
    exitCode: z.number().int().nullable().optional(),
    signal: z.string().max(32).optional(),
  })
  .strict();
export type RunRef = z.infer<typeof RunRef>;

/** A fixed-field audit event; it never carries terminal data, secrets or raw errors. */
export const AuditEvent = z
  .object({
    id: Id,
    workspaceId: Id,
    actorId: Id,
    action: AuditActionSchema,
    resource: z.object({ kind: ResourceKind, workspaceId: Id, id: Id, creatorId: Id }).strict(),
    at: EpochMs,
    usage: Usage,
    /** The placement generation a session event happened under; 0 for other resources. */
    placementGeneration: Generation,
    /** On `run.started`, `run.completed` and `run.failed` only: the app generation the event is about. */
    run: RunRef.optional(),
    /** On `agent.*` events: which agent (and on `agent.resume`, its successor); `usage.agentTokenCount` is what a turn reported. */
    agent: z.object({ id: Id, successorId: Id.optional(), turn: z.enum(["start", "end"]).optional() }).strict().optional(),
    /** On a step the scheduler took by itself: why (`idle`, `lifetime`, `drain`). */
    reason: PolicyReason.optional(),
  })
  .strict();
export type AuditEvent = z.infer<typeof AuditEvent>;
