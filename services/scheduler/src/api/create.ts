import { createHash } from "node:crypto";
import { z } from "zod";
import {
  ConflictError,
  ForbiddenError,
  InvalidError,
  isTerminal,
  NotFoundError,
  Session,
  sessionKey,
  type CreateSessionBody,
  type Environment,
  type Scope,
  sessionPorts,
} from "@paddock/contracts";
import { decodeJson, encoderOf, isWrongLastSequence } from "@paddock/bus";
import type { SchedulerContext } from "../context.ts";
import { makeRoom } from "./evict.ts";
import { layerSpec, requirementsOf } from "../state/layering.ts";

/** What an idempotency key maps to: the whole record it created, so a replay after a crash can finish the job. */
const IdempotencyRecord = z.object({ bodyHash: z.string(), session: Session }).strict();

function sha256(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

function idempotencyKeyOf(scope: Scope, key: string): string {
  return `${scope.workspaceId}.${scope.actor.id}.${sha256(key)}`;
}

function nameKeyOf(workspaceId: string, creatorId: string, name: string): string {
  // Names may contain dots, which KV treats as token separators: hex keeps one token.
  return `${workspaceId}.${creatorId}.${Buffer.from(name).toString("hex")}`;
}

/**
 * What a recycle's replacement is given: the id the released record already
 * names as its successor (so a recycle finished after a crash writes the same
 * record), its predecessor, and the released session's creator (a
 * replacement stays in its creator's roster and keeps its name there).
 */
export interface Lineage {
  id: string;
  predecessorId: string;
  creatorId: string;
}

function newRecord(ctx: SchedulerContext, scope: Scope, body: CreateSessionBody, env: Environment | undefined, lineage?: Lineage): Session {
  const at = ctx.now();
  const id = lineage?.id ?? ctx.newId("ses");
  const spec = layerSpec(env, body.spec, body.repos);
  checkRepoSecrets(env, spec);
  const requirements = requirementsOf(env, spec);
  const ports = sessionPorts(id, spec);
  // The session's own policy over its environment's, field by field.
  const idle = { ...env?.idle, ...body.idle };
  const maxLifetimeMs = body.maxLifetimeMs ?? env?.maxLifetimeMs;
  return {
    id,
    workspaceId: scope.workspaceId,
    creatorId: lineage?.creatorId ?? scope.actor.id,
    ...(body.name !== undefined ? { name: body.name } : {}),
    state: "queued",
    ...(body.environmentId !== undefined ? { environmentId: body.environmentId } : {}),
    // Layered over the environment by the PortableSpec rules; requirements come from it (and image:oci for an image), never from the request.
    spec,
    ...(ports.length > 0 ? { ports } : {}),
    ...(idle.warmAfterMs !== undefined || idle.coldAfterMs !== undefined ? { idle } : {}),
    ...(maxLifetimeMs !== undefined ? { maxLifetimeMs } : {}),
    ...(env ? { setupHash: env.setupHash } : {}),
    ...(env || spec.image !== undefined ? { requirements } : {}),
    mode: body.mode ?? "run",
    oneShot: body.oneShot ?? false,
    ...(body.parentId !== undefined ? { parentId: body.parentId } : {}),
    ...(lineage ? { predecessorId: lineage.predecessorId } : {}),
    placementGeneration: 0,
    controllerGeneration: 0,
    ...(body.idempotencyKey !== undefined ? { idempotencyKey: body.idempotencyKey } : {}),
    childExitCode: null,
    createdAt: at,
    updatedAt: at,
    lastFact: { eventId: ctx.newId("evt"), action: "create", actorId: scope.actor.id, at },
  };
}

/**
 * A repository's secretRef must be one of its environment's secretRefs: an
 * admin chose those for every session of it, and a runner is given no other.
 */
function checkRepoSecrets(env: Environment | undefined, spec: Session["spec"]): void {
  for (const [i, repo] of (spec.repos ?? []).entries()) {
    if (repo.secretRef !== undefined && !(env?.secretRefs ?? []).includes(repo.secretRef)) {
      throw new InvalidError(`repos[${i}].secretRef: ${repo.secretRef} is not one of the environment's secretRefs`);
    }
  }
}

/**
 * A session's own service principal creates children: its session is the
 * parent, whatever the body says (a different parentId is refused).
 */
function withParentOfScope(scope: Scope, body: CreateSessionBody): CreateSessionBody {
  if (scope.sessionId === undefined) return body;
  if (body.parentId !== undefined && body.parentId !== scope.sessionId) {
    throw new InvalidError("a session's token can only create children of that session");
  }
  return { ...body, parentId: scope.sessionId };
}

async function checkReferences(ctx: SchedulerContext, scope: Scope, body: CreateSessionBody): Promise<Environment | undefined> {
  let parent: Session | undefined;
  if (body.parentId !== undefined) {
    parent = (await ctx.sessions.get(sessionKey(scope.workspaceId, body.parentId)))?.value;
    if (!parent) throw new InvalidError("parentId names no session of this workspace");
    if (isTerminal(parent.state)) throw new ConflictError("the parent session has ended");
  }
  if (body.environmentId === undefined) return undefined;
  const env = await ctx.envs.find(scope.workspaceId, body.environmentId);
  if (!env) throw new NotFoundError("environment");
  if (scope.sessionId !== undefined && parent) await checkSecretsGiven(ctx, parent, env.value);
  return env.value;
}

/**
 * A session's token creates children only in environments whose secrets its
 * own session was given (its environment references them now): an admin
 * granted those secrets to that session, and a child must not widen them.
 */
async function checkSecretsGiven(ctx: SchedulerContext, parent: Session, env: Environment): Promise<void> {
  if (env.secretRefs.length === 0) return;
  const own = parent.environmentId === undefined ? undefined : await ctx.envs.find(parent.workspaceId, parent.environmentId);
  const given = new Set(own?.value.secretRefs ?? []);
  const missing = env.secretRefs.filter((name) => !given.has(name));
  if (missing.length > 0) {
    throw new ForbiddenError(`a session's token cannot create a session with secrets its own session was not given: ${missing.join(", ")}`);
  }
}

/**
 * Reserves the name among the creator's non-terminal sessions. A key left by
 * a session that has since ended is taken over by compare-and-set.
 */
async function reserveName(ctx: SchedulerContext, s: Session): Promise<void> {
  if (s.name === undefined) return;
  const key = nameKeyOf(s.workspaceId, s.creatorId, s.name);
  try {
    await ctx.names.create(key, s.id);
    return;
  } catch (err) {
    if (!isWrongLastSequence(err)) throw err;
  }
  const held = await ctx.names.get(key);
  if (!held) throw new ConflictError(`name ${s.name} is being reserved concurrently`);
  const holderId = held.string();
  if (holderId === s.id) return;
  const holder = await ctx.sessions.get(sessionKey(s.workspaceId, holderId));
  if (holder && !isTerminal(holder.value.state)) throw new ConflictError(`a live session is already named ${s.name}`);
  try {
    await ctx.names.update(key, s.id, held.revision);
  } catch (err) {
    if (!isWrongLastSequence(err)) throw err;
    // Two writers of the same record (a recycle finished twice at once): the name is already its.
    if ((await ctx.names.get(key))?.string() === s.id) return;
    throw new ConflictError(`name ${s.name} was taken concurrently`, { cause: err });
  }
}

/** Writes the record if it is not there yet; returns the stored one either way. */
async function ensureWritten(ctx: SchedulerContext, s: Session): Promise<Session> {
  const key = sessionKey(s.workspaceId, s.id);
  try {
    const written = await ctx.sessions.create(key, s);
    ctx.sessionView.apply(key, written);
    return s;
  } catch (err) {
    if (!(err instanceof ConflictError)) throw err;
    const current = await ctx.sessions.get(key);
    if (!current) throw err;
    return current.value;
  }
}

/** Refuses what createSession would refuse for its references, without writing anything (a recycle checks before it releases). */
export async function checkCreate(ctx: SchedulerContext, scope: Scope, requested: CreateSessionBody): Promise<void> {
  const body = withParentOfScope(scope, requested);
  const env = await checkReferences(ctx, scope, body);
  checkRepoSecrets(env, layerSpec(env, body.spec, body.repos));
}

/**
 * Creates a session. With an idempotency key, the first create stores the
 * whole record under the key before writing it, so a concurrent duplicate (on
 * any replica) or a replay after a crash finishes the same record: exactly one
 * session per key.
 */
export async function createSession(
  ctx: SchedulerContext,
  scope: Scope,
  requested: CreateSessionBody,
  lineage?: Lineage,
): Promise<{ session: Session; replayed: boolean }> {
  const body = withParentOfScope(scope, requested);
  const env = await checkReferences(ctx, scope, body);
  let record = newRecord(ctx, scope, body, env, lineage);
  let replayed = false;
  if (body.idempotencyKey !== undefined) {
    const key = idempotencyKeyOf(scope, body.idempotencyKey);
    const bodyHash = sha256(JSON.stringify(body));
    try {
      await ctx.idempotency.create(key, encoderOf(ctx.nc)(IdempotencyRecord, { bodyHash, session: record }));
    } catch (err) {
      if (!isWrongLastSequence(err)) throw err;
      const entry = await ctx.idempotency.get(key);
      const stored = entry ? decodeJson(IdempotencyRecord, entry.value) : undefined;
      if (!stored?.ok) throw new ConflictError("idempotency key is being used concurrently");
      if (stored.value.bodyHash !== bodyHash) throw new ConflictError("idempotency key was used with a different request");
      record = stored.value.session;
      replayed = true;
    }
  }
  if (!replayed) await makeRoom(ctx, scope.workspaceId, record.creatorId);
  await reserveName(ctx, record);
  const writing = ensureWritten(ctx, record);
  // Issued after the write, so the answer does not wait behind it. A replayed
  // record may already be placed: only a fresh one is placed beside its write.
  const afterWrite = replayed ? undefined : ctx.placeOnWrite(record);
  let session: Session;
  try {
    session = await writing;
  } catch (err) {
    afterWrite?.(false);
    throw err;
  }
  if (afterWrite) afterWrite(session === record);
  else ctx.requestPlacement();
  return { session, replayed };
}
