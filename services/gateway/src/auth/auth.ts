import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { decodeJson, encoderOf } from "@paddock/bus";
import {
  FLEET_WORKSPACE,
  Buckets,
  ForbiddenError,
  Membership,
  NotFoundError,
  TokenRecord,
  UnauthenticatedError,
  type Scope,
} from "@paddock/contracts";
import { tokenKey } from "@paddock/contracts/token-key";

/** The KV key of a token: hex sha256. The token itself is never stored or logged. */
export const hashToken = tokenKey;

export function memberKey(workspaceId: string, actorId: string): string {
  return `${workspaceId}.${actorId}`;
}

/** Stores a token record under the token's hash (tests and the dev-token path). */
export async function seedToken(nc: NatsConnection, token: string, record: TokenRecord): Promise<void> {
  const kv = await new Kvm(nc).open(Buckets.tokens);
  await kv.put(hashToken(token), encoderOf(nc)(TokenRecord, record));
}

export async function seedMember(nc: NatsConnection, membership: Membership): Promise<void> {
  const kv = await new Kvm(nc).open(Buckets.members);
  await kv.put(memberKey(membership.workspaceId, membership.actorId), encoderOf(nc)(Membership, membership));
}

/** Opens a bucket once, lazily; a failed open is retried on the next call. */
export function lazyKv(nc: NatsConnection, bucket: string): () => Promise<KV> {
  let opening: Promise<KV> | undefined;
  return () => {
    opening ??= new Kvm(nc).open(bucket).catch((err: unknown) => {
      opening = undefined;
      throw err;
    });
    return opening;
  };
}

const BEARER = /^Bearer ([\x21-\x7e]{1,4096})$/;

/** An authenticated caller: the scope sent to the scheduler, plus what the gateway keeps to itself. */
export interface Principal {
  scope: Scope;
  /** KV `tokens` key of the token: rate limits and revocation of open sockets are keyed by it. */
  tokenHash: string;
  expiresAt?: number | undefined;
}

/**
 * The KV `tokens` key of an Authorization header's bearer token. Missing,
 * malformed, unknown and expired tokens are all the same `unauthenticated`
 * (no oracle on which): this and principalOfHash.
 */
export function tokenHashOf(authorization: string | undefined): string {
  const m = authorization === undefined ? null : BEARER.exec(authorization);
  const token = m?.[1];
  if (!token) throw new UnauthenticatedError();
  return hashToken(token);
}

/**
 * An expired token. It answers exactly like any other token failure (same
 * code, same message: no "expired" versus "unknown" oracle); only the
 * gateway's own stream guard tells it apart, to say why it closed a socket.
 */
export class TokenExpiredError extends UnauthenticatedError {}

/** The principal of a token hash as KV holds it NOW: revoked (deleted), unknown and expired are unauthenticated. */
export async function principalOfHash(tokens: () => Promise<KV>, tokenHash: string, now: () => number): Promise<Principal> {
  const entry = await (await tokens()).get(tokenHash);
  if (!entry || entry.operation !== "PUT") throw new UnauthenticatedError();
  const decoded = decodeJson(TokenRecord, entry.value);
  if (!decoded.ok) throw new UnauthenticatedError();
  const record = decoded.value;
  if (record.expiresAt !== undefined && record.expiresAt <= now()) throw new TokenExpiredError();
  // A session's own service token: the scheduler makes this principal's creates children of it.
  const scope: Scope = { workspaceId: record.workspaceId, actor: record.actor, ...(record.sessionId !== undefined ? { sessionId: record.sessionId } : {}) };
  return { scope, tokenHash, expiresAt: record.expiresAt };
}

/**
 * What a caller asks to do. Workspace-level actions take a workspace resource;
 * the rest take the resource they act on.
 */
export const Action = {
  createSession: "session.create",
  listSessions: "session.list",
  getSession: "session.get",
  deleteSession: "session.delete",
  suspendSession: "session.suspend",
  resumeSession: "session.resume",
  snapshotSession: "session.snapshot",
  recycleSession: "session.recycle",
  restartApp: "session.restart_app",
  attachViewer: "session.attach_viewer",
  attachController: "session.attach_controller",
  readLog: "session.read_log",
  /** Write files into the sandbox (PUT /workspace): the creator or an admin. */
  pushWorkspace: "session.workspace_push",
  /** Read files out of the sandbox (GET /workspace): any member. */
  pullWorkspace: "session.workspace_pull",
  /** Read the per-repository diff (GET /diff): any member. */
  readDiff: "session.diff",
  /** Read one file or list a directory (GET /files, /files/list): any member. */
  readFiles: "session.files_read",
  /** Write or remove a file (PUT, DELETE /files): the creator or an admin, as a push. */
  writeFiles: "session.files_write",
  /** Run a command in the sandbox, write an exec'd process's stdin or signal it: the creator or an admin (controller-level). */
  exec: "session.exec",
  /** List exec'd processes and read their output: any member (as the terminal log). */
  readProcesses: "session.processes_read",
  /** Reach a private port of the session (a preview): the creator or an admin, as exec (an app may run anything asked of it). */
  preview: "session.preview",
  /** Declare, park and resume agents and report their turns: the session's own token, its creator or an admin. */
  writeAgents: "session.agents_write",
  /** List, get, resolve and wait for agents: any member, and the session's own token. */
  readAgents: "session.agents_read",
  readEvents: "events.read",
  listRunners: "runner.list",
  getRunner: "runner.get",
  setRunnerState: "runner.set_state",
  /** Mint a join token for a pool, and revoke a joined runner: fleet operators only. */
  createJoinToken: "runner.create_join_token",
  revokeRunner: "runner.revoke",
  createEnvironment: "environment.create",
  /**
   * Reference secrets from an environment (create with secretRefs; an update
   * is admin-only anyway): every session of the environment is given their
   * values, so only an admin decides which secrets reach which sessions.
   */
  grantSecrets: "environment.grant_secrets",
  listEnvironments: "environment.list",
  getEnvironment: "environment.get",
  updateEnvironment: "environment.update",
  deleteEnvironment: "environment.delete",
  /** Mint an API token for oneself (users only; a service principal never). */
  createToken: "token.create",
  listTokens: "token.list",
  /** Revoke a token: its own actor, or a workspace admin. */
  revokeToken: "token.revoke",
  /** Store or replace a secret value: admins only. */
  putSecret: "secret.put",
  /** List secret names (never values): any member. */
  listSecrets: "secret.list",
  deleteSecret: "secret.delete",
  /** Register, list, remove webhooks and read their deliveries: admins only, never a session's token. */
  manageWebhooks: "webhook.manage",
  /** List, add, change and remove a workspace's members and mint their tokens: its admins (or a fleet operator), never a session's token. */
  manageMembers: "member.manage",
  /** Create a workspace: fleet operators only. */
  createWorkspace: "workspace.create",
} as const;
export type Action = (typeof Action)[keyof typeof Action];

/** The resource an action is decided on: a workspace, or a resource in one (a session with its creator). */
export type Resource =
  | { kind: "workspace"; workspaceId: string }
  | { kind: "session"; workspaceId: string; id: string; creatorId: string }
  | { kind: "environment"; workspaceId: string; id: string }
  | { kind: "token"; workspaceId: string; id: string; creatorId: string };

/** Actions only the resource's creator or a workspace admin may take. */
const ownerActions: ReadonlySet<Action> = new Set([
  Action.deleteSession,
  Action.attachController,
  Action.suspendSession,
  Action.resumeSession,
  Action.snapshotSession,
  Action.recycleSession,
  Action.restartApp,
  Action.pushWorkspace,
  Action.writeFiles,
  Action.exec,
  Action.preview,
  Action.writeAgents,
  Action.revokeToken,
]);

/** Actions a service principal (a session's token, a runner) may never take, whatever its membership. */
/** A session's own token never touches the secret store (its sandbox holds the values it was given). */
const secretActions: ReadonlySet<Action> = new Set([Action.putSecret, Action.listSecrets, Action.deleteSecret, Action.manageWebhooks, Action.manageMembers]);

const userOnlyActions: ReadonlySet<Action> = new Set([Action.createToken]);

/** Actions only a workspace admin may take (environments have no creator). */
const adminActions: ReadonlySet<Action> = new Set([Action.updateEnvironment, Action.deleteEnvironment, Action.grantSecrets, Action.putSecret, Action.deleteSecret, Action.manageWebhooks, Action.manageMembers]);

/**
 * Actions on the fleet itself: only a fleet operator — a user who is an admin
 * of the reserved FLEET_WORKSPACE — whatever workspace its token is for.
 * Runners serve every workspace, so no workspace's admin may steer them.
 */
const fleetActions: ReadonlySet<Action> = new Set([Action.setRunnerState, Action.createWorkspace, Action.createJoinToken, Action.revokeRunner]);

/** What a session's token may do to the sessions it created (its roster): read and release them. */
const rosterActions: ReadonlySet<Action> = new Set([Action.getSession, Action.deleteSession, Action.recycleSession]);

/** A session the session principal's token created: the scheduler made it a child of that session. */
function inRoster(scope: Scope, resource: Resource): boolean {
  return resource.kind === "session" && scope.sessionId !== undefined && resource.id !== scope.sessionId && resource.creatorId === scope.actor.id;
}

/**
 * What a session's own service principal may do without a membership: create
 * sessions (the scheduler makes them its children), list them (the scheduler
 * lists it only those), read, delete and recycle them, and read its own
 * session. Nothing else of the workspace.
 */
function sessionPrincipalMay(scope: Scope, action: Action, resource: Resource): boolean {
  if (scope.sessionId === undefined) return false;
  if (action === Action.createSession || action === Action.listSessions) return resource.kind === "workspace";
  if (action === Action.getSession && resource.kind === "session" && resource.id === scope.sessionId) return true;
  // Its agents declare, report turns, park and resume with its own token (issue 26).
  if ((action === Action.readAgents || action === Action.writeAgents) && resource.kind === "session" && resource.id === scope.sessionId) return true;
  return rosterActions.has(action) && inRoster(scope, resource);
}

/**
 * Whether a principal without a membership may still see a resource (and so
 * be told 403 rather than 404): the workspace its token is for, and a session
 * principal's own session and the sessions it created.
 */
function mayStillSee(scope: Scope, resource: Resource): boolean {
  if (resource.kind === "workspace") return true;
  return resource.kind === "session" && scope.sessionId !== undefined && (resource.id === scope.sessionId || inRoster(scope, resource));
}

export class Authorizer {
  /** Membership reads started for a request's scope (see prefetch); gone with the scope object. */
  private readonly prefetched = new WeakMap<Scope, Promise<Membership | undefined>>();

  constructor(private readonly members: () => Promise<KV>) {}

  /**
   * Starts reading the membership a request's scope will be authorized
   * against, or adopts a read of the same key the caller already started
   * while the request was being authenticated. The read still belongs to this
   * request alone: it overlaps the request's other round trips (the token
   * read, a resource fetch) instead of following them.
   */
  prefetch(scope: Scope, started?: Promise<Membership | undefined>): void {
    const read = started ?? this.membership(scope.workspaceId, scope.actor.id);
    // Awaited by authorize, if the request gets that far; a failure is seen there.
    read.catch(() => undefined);
    this.prefetched.set(scope, read);
  }

  /**
   * Decides on the CURRENT membership: read from KV for every request (at the
   * earliest once the request arrived, see prefetch), never cached across
   * requests. Another workspace's resource is not_found, never forbidden.
   */
  async authorize(scope: Scope, action: Action, resource: Resource): Promise<void> {
    if (resource.workspaceId !== scope.workspaceId) {
      throw new NotFoundError(resource.kind === "workspace" ? "workspace" : resource.kind);
    }
    if (userOnlyActions.has(action) && (scope.actor.kind !== "user" || scope.sessionId !== undefined)) {
      throw new ForbiddenError(`${action} is not allowed to a service principal`);
    }
    if (secretActions.has(action) && scope.sessionId !== undefined) {
      throw new ForbiddenError(`${action} is not allowed to a session principal`);
    }
    if (sessionPrincipalMay(scope, action, resource)) return;
    const membership = await (this.prefetched.get(scope) ?? this.membership(scope.workspaceId, scope.actor.id));
    if (!membership) {
      // Who may not see a resource gets the 404 of one that does not exist (no existence oracle).
      if (!mayStillSee(scope, resource)) throw new NotFoundError(resource.kind);
      throw new ForbiddenError("not a member of this workspace");
    }
    if (fleetActions.has(action)) {
      const operator = scope.actor.kind === "user" && scope.sessionId === undefined ? await this.membership(FLEET_WORKSPACE, scope.actor.id) : undefined;
      if (operator?.role === "admin") return;
      throw new ForbiddenError(`${action} needs a fleet operator (an admin of workspace ${FLEET_WORKSPACE})`);
    }
    if (membership.role === "admin") return;
    if (adminActions.has(action)) throw new ForbiddenError(`${action} needs a workspace admin`);
    if (!ownerActions.has(action)) return;
    if ((resource.kind === "session" || resource.kind === "token") && resource.creatorId === scope.actor.id) return;
    throw new ForbiddenError(`${action} needs the resource's creator or a workspace admin`);
  }

  /** The current membership of an actor in a workspace, read now (never cached). */
  async membership(workspaceId: string, actorId: string): Promise<Membership | undefined> {
    const entry = await (await this.members()).get(memberKey(workspaceId, actorId));
    const decoded = entry && entry.operation === "PUT" ? decodeJson(Membership, entry.value) : undefined;
    const m = decoded?.ok ? decoded.value : undefined;
    return m && m.workspaceId === workspaceId && m.actorId === actorId ? m : undefined;
  }
}

/** Seeds the configured dev token: an admin of the dev workspace and a fleet operator (never logged). */
export async function seedDevToken(
  nc: NatsConnection,
  opts: { token: string; workspaceId: string; actorId: string; now: number },
): Promise<void> {
  await seedToken(nc, opts.token, {
    workspaceId: opts.workspaceId,
    actor: { id: opts.actorId, kind: "user" },
    label: "dev token",
    createdAt: opts.now,
  });
  await seedMember(nc, { workspaceId: opts.workspaceId, actorId: opts.actorId, role: "admin" });
  // One machine, one person: the developer also runs the fleet (drain, cordon, uncordon).
  await seedMember(nc, { workspaceId: FLEET_WORKSPACE, actorId: opts.actorId, role: "admin" });
}
