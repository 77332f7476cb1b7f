import { z } from "zod";
import { ErrorBody } from "./errors.ts";
import { Runner, SettableRunnerState } from "./fleet.ts";
import { Id } from "./ids.ts";
import { Scope } from "./auth.ts";
import { CreateEnvironmentBody, Environment, UpdateEnvironmentBody } from "./environment.ts";
import { Checkpoint, CreateSessionBody, Session } from "./session.ts";
import { AttachMode } from "./terminal.ts";
import { Subjects } from "./names.ts";
import type { Rpc } from "./rpc.ts";
import { PortNumber } from "./ports.ts";
import { TransferDirection } from "./workspace.ts";

export type { Rpc } from "./rpc.ts";
export { packWithBytes, unpackWithBytes } from "./rpc.ts";

function rpc<Req extends z.ZodType, Res extends z.ZodType>(
  resource: string,
  verb: string,
  request: Req,
  result: Res,
): Rpc<Req, Res> {
  return { subject: Subjects.api(resource, verb), request, result };
}

/** Every reply is an envelope: a result, or a typed error. */
export function replyEnvelope<T extends z.ZodType>(result: T) {
  return z.discriminatedUnion("ok", [
    z.object({ ok: z.literal(true), result }).strict(),
    z.object({ ok: z.literal(false), error: ErrorBody }).strict(),
  ]);
}

/** Hard cap on a page; larger requested limits are clamped to it. */
export const MAX_PAGE_LIMIT = 500;
export const DEFAULT_PAGE_LIMIT = 50;

export const Api = {
  createSession: rpc(
    "sessions",
    "create",
    z.object({ scope: Scope, body: CreateSessionBody }).strict(),
    z.object({ session: Session, replayed: z.boolean() }).strict(),
  ),
  getSession: rpc(
    "sessions",
    "get",
    z.object({ scope: Scope, sessionId: Id }).strict(),
    z.object({ session: Session }).strict(),
  ),
  listSessions: rpc(
    "sessions",
    "list",
    z
      .object({
        scope: Scope,
        limit: z.number().int().min(1).max(MAX_PAGE_LIMIT),
        cursor: z.string().max(256).optional(),
        includeTerminal: z.boolean(),
        parentId: Id.optional(),
        creatorId: Id.optional(),
      })
      .strict(),
    z.object({ sessions: z.array(Session), nextCursor: z.string().optional() }).strict(),
  ),
  deleteSession: rpc(
    "sessions",
    "delete",
    z.object({ scope: Scope, sessionId: Id }).strict(),
    z.object({ session: Session }).strict(),
  ),
  /** Grants an attach; a controller attach advances controllerGeneration atomically. */
  attachSession: rpc(
    "sessions",
    "attach",
    z.object({ scope: Scope, sessionId: Id, mode: AttachMode }).strict(),
    z.object({ session: Session }).strict(),
  ),
  /** Warm: processes stopped in place, slot kept. Cold: checkpoint, sandbox removed, slot freed. */
  suspendSession: rpc(
    "sessions",
    "suspend",
    z.object({ scope: Scope, sessionId: Id, warm: z.boolean() }).strict(),
    z.object({ session: Session }).strict(),
  ),
  /** Warm: continue in place. Cold: queue for placement on any runner of the pool, restore, restart apps. */
  resumeSession: rpc(
    "sessions",
    "resume",
    z.object({ scope: Scope, sessionId: Id }).strict(),
    z.object({ session: Session }).strict(),
  ),
  /** Checkpoints a running session without stopping it. */
  /** Without `checkpoint` the runner has not finished within the call's wait: `requestId` names the request to wait on (snapshotOutcome). */
  snapshotSession: rpc(
    "sessions",
    "snapshot",
    z.object({ scope: Scope, sessionId: Id }).strict(),
    z.object({ requestId: Id, checkpoint: Checkpoint.optional(), session: Session }).strict(),
  ),
  /**
   * Releases the session and creates a fresh one with the same spec and a new
   * id (the released record's `successorId`, the new one's `predecessorId`);
   * asked again for a released session, answers the same pair.
   */
  recycleSession: rpc(
    "sessions",
    "recycle",
    z.object({ scope: Scope, sessionId: Id }).strict(),
    z.object({ released: Session, session: Session }).strict(),
  ),
  /** Commits that the workspace was pushed or pulled (the audit fact of a transfer). */
  /**
   * A preview's target (docs/ports.md): the session a preview URL names, by
   * id alone (a public port has no caller to scope it), when it declares the
   * port; not_found otherwise. Only the gateway calls it, and it answers a
   * private port's caller only after authorizing them on the record.
   */
  previewTarget: rpc(
    "sessions",
    "preview_target",
    z.object({ sessionId: Id, port: PortNumber }).strict(),
    z.object({ session: Session, public: z.boolean() }).strict(),
  ),
  recordTransfer: rpc(
    "sessions",
    "record_transfer",
    z.object({ scope: Scope, sessionId: Id, direction: TransferDirection }).strict(),
    z.object({ session: Session }).strict(),
  ),
  /** Starts the next generation of one app. */
  restartApp: rpc(
    "sessions",
    "restart_app",
    z.object({ scope: Scope, sessionId: Id, app: Id }).strict(),
    z.object({ session: Session }).strict(),
  ),
  createEnvironment: rpc(
    "environments",
    "create",
    z.object({ scope: Scope, body: CreateEnvironmentBody }).strict(),
    z.object({ environment: Environment }).strict(),
  ),
  getEnvironment: rpc(
    "environments",
    "get",
    z.object({ scope: Scope, environmentId: Id }).strict(),
    z.object({ environment: Environment }).strict(),
  ),
  /** Stable (name, id) order. */
  listEnvironments: rpc(
    "environments",
    "list",
    z.object({ scope: Scope, limit: z.number().int().min(1).max(MAX_PAGE_LIMIT), cursor: z.string().max(512).optional() }).strict(),
    z.object({ environments: z.array(Environment), nextCursor: z.string().optional() }).strict(),
  ),
  updateEnvironment: rpc(
    "environments",
    "update",
    z.object({ scope: Scope, environmentId: Id, body: UpdateEnvironmentBody }).strict(),
    z.object({ environment: Environment }).strict(),
  ),
  /** Refused (conflict) while a non-terminal session uses the environment. */
  deleteEnvironment: rpc(
    "environments",
    "delete",
    z.object({ scope: Scope, environmentId: Id }).strict(),
    z.object({ environment: Environment }).strict(),
  ),
  /** Drain (finish what it holds, take nothing new), cordon (take nothing new) or make active again. */
  setRunnerState: rpc(
    "runners",
    "set_state",
    z.object({ scope: Scope, runnerId: Id, state: SettableRunnerState }).strict(),
    z.object({ runner: Runner }).strict(),
  ),
  /** Declare a runner lost now (its identity was revoked): its sessions move on as when its lease expires. `lost` is false when it already was, or is unknown. */
  loseRunner: rpc(
    "runners",
    "lose",
    z.object({ scope: Scope, poolId: Id, runnerId: Id, reason: z.string().min(1).max(256) }).strict(),
    z.object({ lost: z.boolean() }).strict(),
  ),
  listRunners: rpc(
    "runners",
    "list",
    z
      .object({
        scope: Scope,
        limit: z.number().int().min(1).max(MAX_PAGE_LIMIT),
        cursor: z.string().max(256).optional(),
      })
      .strict(),
    z.object({ runners: z.array(Runner), nextCursor: z.string().optional() }).strict(),
  ),
} as const;
