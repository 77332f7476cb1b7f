import { utf8ByteLength } from "./bytes.ts";
import { z } from "zod";
import { EpochMs, Id } from "./ids.ts";
import { refuseNulAndDeepNesting } from "./body.ts";
import { ImageRef } from "./image-ref.ts";
import { mergeRequirements, Requirements } from "./requirements.ts";
import { Checkpoint, IdlePolicy, MaxLifetimeMs, SealKey, SecretName, SessionFact } from "./session.ts";

/** One declared attachment of an environment; opaque to the control model. */
export const Connector = z.object({ type: z.string().min(1).max(64), raw: z.unknown() }).strict();

/** A secret's name; values live in a secret store and never in a record. */
// Defined beside RepoRef, which names one too (this file imports session.ts, not the reverse).
export { SecretName } from "./session.ts";
const Host = z.string().min(1).max(253);
const Script = z.string().max(64 * 1024);

/** The environment record in KV `environments` under `<workspace>.<environment>`. */
export const Environment = z
  .object({
    id: Id,
    workspaceId: Id,
    name: z.string().min(1).max(128),
    image: z.string().max(512).optional(),
    setup: Script.optional(),
    /** sha256 of image + setup: the identity of the build inputs. */
    setupHash: z.string(),
    /** Per-boot hook, run after setup on every boot. */
    init: Script.optional(),
    initTimeoutSec: z.number().int().positive().max(3600).optional(),
    setupTimeoutSec: z.number().int().positive().max(24 * 3600).optional(),
    egressAllow: z.array(Host).max(256),
    /** Its sessions' idle policy and lifetime (each session may override them). */
    idle: IdlePolicy.optional(),
    maxLifetimeMs: MaxLifetimeMs.optional(),
    secretRefs: z.array(SecretName).max(128),
    connectors: z.array(Connector).max(32),
    requirements: Requirements,
    /** Snapshot built from setup; valid only while snapshotHash equals setupHash. */
    snapshot: Checkpoint.optional(),
    snapshotHash: z.string().optional(),
    createdAt: EpochMs,
    updatedAt: EpochMs,
    /** The fact this revision commits (create, update, snapshot, delete), for the audit feed. */
    lastFact: SessionFact,
  })
  .strict();
export type Environment = z.infer<typeof Environment>;

/** The fields a client sets on an environment (create and PATCH share them). */
const environmentFields = {
  /** An image reference (ImageRef); "" clears it on PATCH. */
  image: z.union([z.literal(""), ImageRef]).optional(),
  setup: Script.optional(),
  init: Script.optional(),
  initTimeoutSec: z.number().int().positive().max(3600).optional(),
  setupTimeoutSec: z.number().int().positive().max(24 * 3600).optional(),
  egressAllow: z.array(Host).max(256).optional(),
  secretRefs: z.array(SecretName).max(128).optional(),
  connectors: z.array(Connector).max(32).optional(),
  requirements: Requirements.partial().strict().optional(),
  /** On PATCH, an empty object clears the policy. */
  idle: IdlePolicy.optional(),
  /** On PATCH, 0 clears it. */
  maxLifetimeMs: z.union([z.literal(0), MaxLifetimeMs]).optional(),
};

/** Body of POST /v1/environments. */
export const CreateEnvironmentBody = z
  .object({ ...environmentFields, name: z.string().min(1).max(128), image: ImageRef.optional() })
  .strict()
  .superRefine(refuseNulAndDeepNesting);
export type CreateEnvironmentBody = z.infer<typeof CreateEnvironmentBody>;

/**
 * Body of PATCH /v1/environments/:id, pointer semantics: an absent field is
 * unchanged; an explicit empty value ("" or []) clears it.
 */
export const UpdateEnvironmentBody = z
  .object({ ...environmentFields, name: z.string().min(1).max(128).optional() })
  .strict()
  .superRefine(refuseNulAndDeepNesting);
export type UpdateEnvironmentBody = z.infer<typeof UpdateEnvironmentBody>;

const clearableStrings = ["image", "setup", "init"] as const;

/**
 * The PATCH semantics, in one place for the scheduler and every fake: an
 * absent field is unchanged, "" clears a string, a list replaces the stored
 * one ([] clears it), requirements merge field by field. Returns the content
 * only: setupHash and the revision's bookkeeping are the caller's.
 */
export function applyEnvironmentPatch(current: Environment, body: UpdateEnvironmentBody): Environment {
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
  if (body.idle !== undefined) {
    if (body.idle.warmAfterMs === undefined && body.idle.coldAfterMs === undefined) delete next.idle;
    else next.idle = { ...body.idle };
  }
  if (body.maxLifetimeMs === 0) delete next.maxLifetimeMs;
  else if (body.maxLifetimeMs !== undefined) next.maxLifetimeMs = body.maxLifetimeMs;
  return next;
}

/** What a runner needs of an environment to boot a session from it (carried on `start`). */
export const BootEnvironment = z
  .object({
    environmentId: Id,
    setup: Script.optional(),
    setupHash: z.string(),
    setupTimeoutSec: z.number().int().positive().optional(),
    init: Script.optional(),
    initTimeoutSec: z.number().int().positive().optional(),
    /** A valid snapshot of setup to restore instead of running setup again. */
    snapshot: Checkpoint.optional(),
    /** The key `snapshot` was sealed with. A secret: never logged. */
    snapshotKey: SealKey.optional(),
    secretRefs: z.array(SecretName),
  })
  .strict();
export type BootEnvironment = z.infer<typeof BootEnvironment>;

export function environmentKey(workspaceId: string, environmentId: string): string {
  return `${workspaceId}.${environmentId}`;
}


/** Largest secret value in UTF-8 bytes (the PUT body is capped at SECRET_BODY_MAX_BYTES). */
export const SECRET_VALUE_MAX_BYTES = 32 * 1024;
export const SECRET_BODY_MAX_BYTES = 64 * 1024;

/** Body of PUT /v1/secrets/:name. The value is never echoed, logged or put in a record. */
export const PutSecretBody = z
  .object({
    value: z
      .string()
      .min(1)
      .refine((v) => utf8ByteLength(v) <= SECRET_VALUE_MAX_BYTES, `value: at most ${SECRET_VALUE_MAX_BYTES} bytes`)
      // An env var cannot hold NUL; refusing it here keeps spawn errors (which may quote env) off the boot path.
      .refine((v) => !v.includes("\0"), "value: must not contain NUL"),
  })
  .strict();
export type PutSecretBody = z.infer<typeof PutSecretBody>;

/** The KV `secrets` key of a secret (workspace and name are both single KV tokens). */
export function secretKey(workspaceId: string, name: string): string {
  return `${workspaceId}.${name}`;
}
