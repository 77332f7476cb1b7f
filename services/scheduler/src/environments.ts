import { createHash } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { Counter, type Registry } from "prom-client";
import {
  Api,
  Buckets,
  ConflictError,
  DEFAULT_PAGE_LIMIT,
  Environment,
  environmentKey,
  Id,
  InvalidError,
  isTerminal,
  MAX_PAGE_LIMIT,
  NO_REQUIREMENTS,
  NotFoundError,
  type AuditAction,
  type CreateEnvironmentBody,
  type RunnerFact,
  type Scope,
  type Session,
  type UpdateEnvironmentBody,
} from "@paddock/contracts";
import { isWrongLastSequence, serveRpc } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { SchedulerContext } from "./context.ts";
import { mergeRequirements, setupHashOf } from "./layering.ts";
import { CasConflictError, Records, type Versioned } from "./store.ts";
import { KvView } from "./view.ts";

/** The RUNNER fact that reports a built environment snapshot. */
export type EnvSnapshotFact = Extract<RunnerFact, { type: "env_snapshot" }>;

export type EnvSnapshotOutcome = "applied" | "stale" | "duplicate";

/** What the environment handlers need of the scheduler's context. */
type EnvCtx = Pick<SchedulerContext, "now" | "newId" | "names" | "sessionView">;
type Clock = Pick<SchedulerContext, "now" | "newId">;

export interface EnvironmentMetrics {
  /** env_snapshot facts discarded because the environment's setupHash moved on (or it is gone). */
  staleSnapshots: Counter;
}

export function createEnvironmentMetrics(registry: Registry): EnvironmentMetrics {
  return {
    staleSnapshots: new Counter({
      name: "paddock_stale_env_snapshots_total",
      help: "Environment snapshots discarded because the environment's setup changed or it was deleted",
      registers: [registry],
    }),
  };
}

/**
 * A record whose last revision commits "delete" is on its way out (the KV
 * delete follows it): every reader treats it as gone.
 */
export function isDeleted(env: Environment): boolean {
  return env.lastFact.action === "delete";
}

/**
 * The environments bucket: exact reads and compare-and-set writes go to KV,
 * listings to the view. Every local write is applied to the view at once, so
 * a replica reads its own writes (including its deletes: the final "delete"
 * revision hides the record until the watch removes it).
 */
export class EnvironmentStore {
  readonly records: Records<typeof Environment>;

  constructor(
    private readonly kv: KV,
    readonly view: KvView<typeof Environment>,
    readonly metrics: EnvironmentMetrics,
  ) {
    this.records = new Records(kv, Environment);
  }

  keyOf(e: { workspaceId: string; id: string }): string {
    return environmentKey(e.workspaceId, e.id);
  }

  /** The live record, or undefined when it does not exist (or is being deleted). */
  async find(workspaceId: string, environmentId: string): Promise<Versioned<Environment> | undefined> {
    const found = await this.records.get(environmentKey(workspaceId, environmentId));
    return found && !isDeleted(found.value) ? found : undefined;
  }

  async create(env: Environment): Promise<Versioned<Environment>> {
    const written = await this.records.create(this.keyOf(env), env);
    this.view.apply(this.keyOf(env), written);
    return written;
  }

  /** Compare-and-set; CasConflictError when someone wrote first. */
  async write(next: Environment, revision: number): Promise<Versioned<Environment>> {
    const written = await this.records.update(this.keyOf(next), next, revision);
    this.view.apply(this.keyOf(next), written);
    return written;
  }

  /** Deletes the key only if it is still at `revision`; CasConflictError otherwise. */
  async remove(env: Environment, revision: number): Promise<void> {
    const key = this.keyOf(env);
    try {
      await this.kv.delete(key, { previousSeq: revision });
    } catch (err) {
      if (isWrongLastSequence(err)) throw new CasConflictError(key);
      throw err;
    }
  }

  /** Live records of one workspace, from the view. */
  *listed(workspaceId: string): Generator<Environment> {
    for (const { value } of this.view.values()) {
      if (value.workspaceId === workspaceId && !isDeleted(value)) yield value;
    }
  }

  stop(): void {
    this.view.stop();
  }
}

/** Opens KV `environments` and starts its view; resolves once the view is ready. */
export async function createEnvironmentStore(
  nc: NatsConnection,
  deps: { log: Logger; registry: Registry },
): Promise<EnvironmentStore> {
  const kv = await new Kvm(nc).open(Buckets.environments);
  const view = new KvView(Environment);
  await view.start(nc, kv, Buckets.environments, deps.log);
  return new EnvironmentStore(kv, view, createEnvironmentMetrics(deps.registry));
}

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
  return env;
}

const clearableStrings = ["image", "setup", "init"] as const;

/**
 * Pointer semantics: an absent field is unchanged, "" clears a string, a
 * list replaces the stored one ([] clears it), requirements merge field by
 * field. setupHash follows image and setup; the snapshot is kept, and is
 * simply stale once snapshotHash no longer equals the new setupHash.
 * Returns the content only (no fresh fact).
 */
export function patchEnvironment(current: Environment, body: UpdateEnvironmentBody): Environment {
  const next: Environment = { ...current };
  if (body.name !== undefined) next.name = body.name;
  for (const field of clearableStrings) {
    const value = body[field];
    if (value === undefined) continue;
    if (value === "") delete next[field];
    else next[field] = value;
  }
  if (body.initTimeoutSec !== undefined) next.initTimeoutSec = body.initTimeoutSec;
  if (body.setupTimeoutSec !== undefined) next.setupTimeoutSec = body.setupTimeoutSec;
  if (body.egressAllow !== undefined) next.egressAllow = [...body.egressAllow];
  if (body.secretRefs !== undefined) next.secretRefs = [...body.secretRefs];
  if (body.connectors !== undefined) next.connectors = [...body.connectors];
  if (body.requirements !== undefined) next.requirements = mergeRequirements(current.requirements, body.requirements);
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
// Names: unique within a workspace, reserved in KV `names`

/**
 * `<ws>.env.name.<sha256(name)>`: four tokens, so it can never collide with a
 * session name key (`<ws>.<creator>.<hex>`, three tokens), and bounded in
 * length whatever the name (names are up to 128 characters of any script).
 */
export function envNameKey(workspaceId: string, name: string): string {
  return `${workspaceId}.env.name.${createHash("sha256").update(name).digest("hex")}`;
}

/** The id of the live environment that holds `name`, if another one does. */
async function otherHolder(ctx: EnvCtx, envs: EnvironmentStore, ws: string, name: string, self: string): Promise<{ holder: string | undefined; revision: number } | undefined> {
  const entry = await ctx.names.get(envNameKey(ws, name));
  if (!entry || entry.operation !== "PUT") return undefined;
  const holder = entry.string();
  if (holder === self) return { holder: undefined, revision: entry.revision };
  const held = await envs.find(ws, holder);
  // A holder that is gone, or has since been renamed, no longer holds the name.
  const live = held !== undefined && held.value.name === name;
  return { holder: live ? holder : undefined, revision: entry.revision };
}

function nameTaken(name: string): ConflictError {
  return new ConflictError(`an environment named ${JSON.stringify(name)} already exists in this workspace`);
}

/** Fast path before any write: refuses a name a live environment holds. */
async function assertNameFree(ctx: EnvCtx, envs: EnvironmentStore, ws: string, name: string, self: string): Promise<void> {
  if ((await otherHolder(ctx, envs, ws, name, self))?.holder !== undefined) throw nameTaken(name);
}

/**
 * Claims `name` for `self`, whose record already carries the name (records
 * are written first, so a key naming a missing record names one that is gone
 * for good and may be taken over). Every claim is a create or a
 * compare-and-set on the key, even when `self` already holds it, so two
 * claimants racing for one name cannot both win.
 */
async function claimName(ctx: EnvCtx, envs: EnvironmentStore, ws: string, name: string, self: string): Promise<void> {
  const key = envNameKey(ws, name);
  for (let attempt = 0; attempt < 10; attempt++) {
    try {
      await ctx.names.create(key, self);
      return;
    } catch (err) {
      if (!isWrongLastSequence(err)) throw err;
    }
    const held = await otherHolder(ctx, envs, ws, name, self);
    if (!held) continue; // deleted in between: create again
    if (held.holder !== undefined) throw nameTaken(name);
    try {
      await ctx.names.update(key, self, held.revision);
      return;
    } catch (err) {
      if (!isWrongLastSequence(err)) throw err;
    }
  }
  throw new ConflictError(`name ${JSON.stringify(name)} is being claimed concurrently`);
}

/** Releases `name` if `self` still holds it; a lost race leaves it to its new holder. */
async function releaseName(ctx: EnvCtx, ws: string, name: string, self: string): Promise<void> {
  const key = envNameKey(ws, name);
  const entry = await ctx.names.get(key);
  if (!entry || entry.operation !== "PUT" || entry.string() !== self) return;
  try {
    await ctx.names.delete(key, { previousSeq: entry.revision });
  } catch (err) {
    if (!isWrongLastSequence(err)) throw err;
  }
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
