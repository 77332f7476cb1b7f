import { isDeepStrictEqual } from "node:util";
import type { Subscription } from "@nats-io/transport-node";
import {
  Api,
  applyEnvironmentPatch,
  ConflictError,
  DEFAULT_PAGE_LIMIT,
  Environment,
  environmentKey,
  Id,
  InvalidError,
  isTerminal,
  MAX_PAGE_LIMIT,
  mergeRequirements,
  NO_REQUIREMENTS,
  NotFoundError,
  type AuditAction,
  type CreateEnvironmentBody,
  type RunnerFact,
  type Scope,
  type Session,
  type UpdateEnvironmentBody,
} from "@paddock/contracts";
import { serveRpc } from "@paddock/bus";
import type { SchedulerContext } from "../context.ts";
import { assertNameFree, claimName, releaseName } from "./environment-names.ts";
import { isDeleted, type EnvironmentStore } from "../state/environment-store.ts";
import { setupHashOf } from "../state/layering.ts";
import { CasConflictError, type Versioned } from "../state/store.ts";

/** The RUNNER fact that reports a built environment snapshot. */
export type EnvSnapshotFact = Extract<RunnerFact, { type: "env_snapshot" }>;

export type EnvSnapshotOutcome = "applied" | "stale" | "duplicate";

/** What the environment handlers need of the scheduler's context. */
type EnvCtx = Pick<SchedulerContext, "now" | "newId" | "names" | "sessionView">;
type Clock = Pick<SchedulerContext, "now" | "newId">;

// ---------------------------------------------------------------------------
// Records: pure builders

/** A new revision committing `action`, with a fresh event id (the record is the audit outbox). */
function stamp(ctx: Clock, env: Environment, action: AuditAction, actorId: string): Environment {
  const at = ctx.now();
  return { ...env, updatedAt: at, lastFact: { eventId: ctx.newId("evt"), action, actorId, at } };
}

export function newEnvironment(ctx: Clock, scope: Scope, body: CreateEnvironmentBody): Environment {
  const at = ctx.now();
  const env: Environment = {
    id: ctx.newId("env"),
    workspaceId: scope.workspaceId,
    name: body.name,
    setupHash: setupHashOf(body),
    egressAllow: [...(body.egressAllow ?? [])],
    secretRefs: [...(body.secretRefs ?? [])],
    connectors: [...(body.connectors ?? [])],
    requirements: mergeRequirements(NO_REQUIREMENTS, body.requirements),
    createdAt: at,
    updatedAt: at,
    lastFact: { eventId: ctx.newId("evt"), action: "create", actorId: scope.actor.id, at },
  };
  if (body.image !== undefined) env.image = body.image;
  if (body.setup !== undefined) env.setup = body.setup;
  if (body.init !== undefined) env.init = body.init;
  if (body.initTimeoutSec !== undefined) env.initTimeoutSec = body.initTimeoutSec;
  if (body.setupTimeoutSec !== undefined) env.setupTimeoutSec = body.setupTimeoutSec;
  if (body.idle !== undefined && (body.idle.warmAfterMs !== undefined || body.idle.coldAfterMs !== undefined)) env.idle = { ...body.idle };
  if (body.maxLifetimeMs !== undefined && body.maxLifetimeMs > 0) env.maxLifetimeMs = body.maxLifetimeMs;
  return env;
}

/**
 * The contract's PATCH semantics (applyEnvironmentPatch); setupHash follows
 * image and setup. The snapshot is kept, and is simply stale once
 * snapshotHash no longer equals the new setupHash. Returns the content only
 * (no fresh fact).
 */
export function patchEnvironment(current: Environment, body: UpdateEnvironmentBody): Environment {
  const next = applyEnvironmentPatch(current, body);
  next.setupHash = setupHashOf(next);
  return next;
}

/** Puts back, on `current`, every field `body` touched as it was on `before` (undoing a lost rename). */
function revertPatch(current: Environment, before: Environment, body: UpdateEnvironmentBody): Environment {
  const next: Record<string, unknown> = { ...current };
  for (const field of Object.keys(body) as (keyof UpdateEnvironmentBody)[]) {
    if (body[field] === undefined) continue;
    if (before[field] === undefined) delete next[field];
    else next[field] = before[field];
  }
  const env = next as Environment;
  return { ...env, setupHash: setupHashOf(env) };
}

/** Equal content, ignoring the revision's bookkeeping (updatedAt, lastFact). */
function sameContent(a: Environment, b: Environment): boolean {
  const { updatedAt: _a, lastFact: _fa, ...restA } = a;
  const { updatedAt: _b, lastFact: _fb, ...restB } = b;
  return isDeepStrictEqual(restA, restB);
}

// ---------------------------------------------------------------------------
// Operations

export async function createEnvironment(ctx: EnvCtx, envs: EnvironmentStore, scope: Scope, body: CreateEnvironmentBody): Promise<Environment> {
  const env = newEnvironment(ctx, scope, body);
  await assertNameFree(ctx, envs, env.workspaceId, env.name, env.id);
  const written = await envs.create(env);
  try {
    await claimName(ctx, envs, env.workspaceId, env.name, env.id);
  } catch (err) {
    // Lost the name to a concurrent create: this record never existed for anyone.
    await withdraw(ctx, envs, env, written.revision, scope.actor.id);
    throw err;
  }
  return env;
}

/** Removes a record that lost its name race: a final "delete" revision, then the key. */
async function withdraw(ctx: Clock, envs: EnvironmentStore, env: Environment, revision: number, actorId: string): Promise<void> {
  const final = await envs.write(stamp(ctx, env, "delete", actorId), revision);
  await envs.remove(final.value, final.revision);
}

export async function getEnvironment(envs: EnvironmentStore, scope: Scope, environmentId: string): Promise<Versioned<Environment>> {
  // The key embeds the caller's workspace: another workspace's environment is simply absent.
  const found = await envs.find(scope.workspaceId, environmentId);
  if (!found) throw new NotFoundError("environment");
  return found;
}

/**
 * The cursor is the last row's sort key: one byte of name length (UTF-16
 * units), the name as UTF-16LE, then the id; base64url. At most 1 + 256 + 64
 * bytes, so it always fits the API's 512-character cursor.
 */
export function encodeEnvCursor(name: string, id: string): string {
  const nameBytes = Buffer.from(name, "utf16le");
  return Buffer.concat([Buffer.from([name.length]), nameBytes, Buffer.from(id, "latin1")]).toString("base64url");
}

const CursorName = Environment.shape.name;

export function decodeEnvCursor(cursor: string): { name: string; id: string } {
  const bytes = Buffer.from(cursor, "base64url");
  const units = bytes[0];
  if (units !== undefined && bytes.toString("base64url") === cursor) {
    const name = bytes.subarray(1, 1 + units * 2).toString("utf16le");
    const id = bytes.subarray(1 + units * 2).toString("latin1");
    if (name.length === units && CursorName.safeParse(name).success && Id.safeParse(id).success) return { name, id };
  }
  throw new InvalidError("cursor is not one this API issued");
}

function byNameThenId(a: { name: string; id: string }, b: { name: string; id: string }): number {
  if (a.name !== b.name) return a.name < b.name ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** One page in stable (name, id) order. */
export function listEnvironments(
  envs: EnvironmentStore,
  q: { scope: Scope; limit: number; cursor?: string | undefined },
): { environments: Environment[]; nextCursor?: string } {
  const after = q.cursor !== undefined ? decodeEnvCursor(q.cursor) : undefined;
  const limit = Math.min(q.limit || DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT);
  const rows = [...envs.listed(q.scope.workspaceId)]
    .filter((e) => after === undefined || byNameThenId(e, after) > 0)
    .sort(byNameThenId);
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return rows.length > limit && last ? { environments: page, nextCursor: encodeEnvCursor(last.name, last.id) } : { environments: page };
}

/** Patches by compare-and-set on the revision read, retried on lost races; a no-op patch writes nothing. */
export async function updateEnvironment(
  ctx: EnvCtx,
  envs: EnvironmentStore,
  scope: Scope,
  environmentId: string,
  body: UpdateEnvironmentBody,
): Promise<Environment> {
  for (;;) {
    const current = await getEnvironment(envs, scope, environmentId);
    const before = current.value;
    const patched = patchEnvironment(before, body);
    if (sameContent(before, patched)) return before;
    const renamed = patched.name !== before.name;
    if (renamed) await assertNameFree(ctx, envs, scope.workspaceId, patched.name, before.id);
    const next = stamp(ctx, patched, "update", scope.actor.id);
    try {
      await envs.write(next, current.revision);
    } catch (err) {
      if (err instanceof CasConflictError) continue;
      throw err;
    }
    if (renamed) {
      try {
        await claimName(ctx, envs, scope.workspaceId, next.name, next.id);
      } catch (err) {
        await undoRename(ctx, envs, before, next, body, scope.actor.id);
        throw err;
      }
      await releaseName(ctx, scope.workspaceId, before.name, before.id);
    }
    return next;
  }
}

/** A rename that lost its name race: put back what the patch changed, unless the record moved on. */
async function undoRename(ctx: Clock, envs: EnvironmentStore, before: Environment, written: Environment, body: UpdateEnvironmentBody, actorId: string): Promise<void> {
  const key = envs.keyOf(written);
  const reverted = await envs.records.mutate(key, (current) => {
    if (isDeleted(current) || current.name !== written.name) return undefined;
    return stamp(ctx, revertPatch(current, before, body), "update", actorId);
  });
  if (reverted) envs.view.apply(key, reverted);
}

/** Non-terminal sessions of the workspace that boot from this environment (from the view). */
export function sessionsUsing(sessions: Iterable<Versioned<Session>>, workspaceId: string, environmentId: string): Session[] {
  const out: Session[] = [];
  for (const { value: s } of sessions) {
    if (s.workspaceId === workspaceId && s.environmentId === environmentId && !isTerminal(s.state)) out.push(s);
  }
  return out;
}

/**
 * Deletes an environment no live session uses: a final revision committing
 * "delete" (the audit fact), then the key, then its name. Deleting again is
 * not_found; a delete left half done (final revision written, key still
 * there) is finished by the next attempt, which also answers not_found.
 */
export async function deleteEnvironment(ctx: EnvCtx, envs: EnvironmentStore, scope: Scope, environmentId: string): Promise<Environment> {
  const key = environmentKey(scope.workspaceId, environmentId);
  for (;;) {
    const current = await envs.records.get(key);
    if (!current) throw new NotFoundError("environment");
    if (isDeleted(current.value)) {
      await finishDelete(ctx, envs, current.value, current.revision);
      throw new NotFoundError("environment");
    }
    const using = sessionsUsing(ctx.sessionView.values(), scope.workspaceId, environmentId);
    if (using.length > 0) {
      throw new ConflictError(`environment is in use by ${using.length} live session(s), e.g. ${using[0]?.id ?? ""}`);
    }
    const final = stamp(ctx, current.value, "delete", scope.actor.id);
    try {
      const written = await envs.write(final, current.revision);
      await finishDelete(ctx, envs, final, written.revision);
    } catch (err) {
      if (err instanceof CasConflictError) continue;
      throw err;
    }
    return final;
  }
}

async function finishDelete(ctx: EnvCtx, envs: EnvironmentStore, final: Environment, revision: number): Promise<void> {
  try {
    await envs.remove(final, revision);
  } catch (err) {
    // Only another finisher can have written after a "delete" revision; the key is theirs to remove.
    if (!(err instanceof CasConflictError)) throw err;
  }
  await releaseName(ctx, final.workspaceId, final.name, final.id);
}

/**
 * Records a built snapshot on its environment only while the environment's
 * setupHash still equals the one the snapshot was built for, by
 * compare-and-set (retried on lost races). A snapshot for an older setup, or
 * for an environment that is gone, is discarded and counted.
 */
export async function applyEnvSnapshotFact(
  ctx: Pick<SchedulerContext, "now" | "newId">,
  envs: EnvironmentStore,
  fact: EnvSnapshotFact,
): Promise<EnvSnapshotOutcome> {
  for (;;) {
    const current = await envs.find(fact.workspaceId, fact.environmentId);
    if (!current || current.value.setupHash !== fact.setupHash) {
      envs.metrics.staleSnapshots.inc();
      return "stale";
    }
    const env = current.value;
    if (env.snapshotHash === fact.setupHash && isDeepStrictEqual(env.snapshot, fact.checkpoint)) return "duplicate";
    const next = stamp(ctx, { ...env, snapshot: fact.checkpoint, snapshotHash: fact.setupHash }, "snapshot", fact.runnerId);
    try {
      await envs.write(next, current.revision);
      return "applied";
    } catch (err) {
      if (!(err instanceof CasConflictError)) throw err;
    }
  }
}

// ---------------------------------------------------------------------------
// The five rpcs

/** Serves Api.{create,get,list,update,delete}Environment in the scheduler queue group. */
export function createEnvironmentApi(ctx: SchedulerContext, envs: EnvironmentStore): Subscription[] {
  const opts = { metrics: ctx.bus, log: ctx.log };
  return [
    serveRpc(ctx.nc, Api.createEnvironment, async (req) => ({ environment: await createEnvironment(ctx, envs, req.scope, req.body) }), opts),
    serveRpc(ctx.nc, Api.getEnvironment, async (req) => ({ environment: (await getEnvironment(envs, req.scope, req.environmentId)).value }), opts),
    serveRpc(ctx.nc, Api.listEnvironments, async (req) => listEnvironments(envs, req), opts),
    serveRpc(
      ctx.nc,
      Api.updateEnvironment,
      async (req) => ({ environment: await updateEnvironment(ctx, envs, req.scope, req.environmentId, req.body) }),
      opts,
    ),
    serveRpc(ctx.nc, Api.deleteEnvironment, async (req) => ({ environment: await deleteEnvironment(ctx, envs, req.scope, req.environmentId) }), opts),
  ];
}
