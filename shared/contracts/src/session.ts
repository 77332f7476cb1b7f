import { z } from "zod";
import type { Scope } from "./auth.ts";
import { refuseNulAndDeepNesting } from "./body.ts";
import { ImageRef } from "./image-ref.ts";
import { EpochMs, Generation, Id } from "./ids.ts";
import { declaredPorts, MAX_PORTS, PortList, SessionPort } from "./ports.ts";
import { Requirements } from "./requirements.ts";
import { PolicyReason, RunRef, RunTrigger, Usage } from "./audit.ts";

/** The session lifecycle vocabulary of the control contract. */
export const SessionState = {
  queued: "queued",
  creating: "creating",
  running: "running",
  suspended_warm: "suspended_warm",
  suspended_cold: "suspended_cold",
  canceled: "canceled",
  failed: "failed",
  dead: "dead",
  destroyed: "destroyed",
} as const;
export type SessionState = (typeof SessionState)[keyof typeof SessionState];
export const SessionStateSchema = z.enum(SessionState);

const terminalStates: ReadonlySet<SessionState> = new Set(["canceled", "failed", "dead", "destroyed"]);
const slotStates: ReadonlySet<SessionState> = new Set(["creating", "running", "suspended_warm"]);

/** A terminal session never changes state again. */
export function isTerminal(state: SessionState): boolean {
  return terminalStates.has(state);
}

/** A session in one of these states holds a slot of its runner's capacity. */
export function occupiesSlot(state: SessionState): boolean {
  return slotStates.has(state);
}

/**
 * Every allowed transition, in one place. The scheduler applies a transition
 * only if it is listed here; anything else is a typed conflict.
 */
export const allowedTransitions: Readonly<Record<SessionState, readonly SessionState[]>> = {
  queued: ["creating", "canceled", "failed"],
  creating: ["running", "failed", "canceled", "dead"],
  running: ["suspended_warm", "suspended_cold", "dead", "destroyed", "failed"],
  suspended_warm: ["running", "suspended_cold", "dead", "destroyed"],
  suspended_cold: ["queued", "destroyed", "failed"],
  canceled: [],
  failed: [],
  dead: [],
  destroyed: [],
};

export function canTransition(from: SessionState, to: SessionState): boolean {
  return allowedTransitions[from].includes(to);
}

/** Whether a session in `from` may still come to be in `to` (itself, or by any number of allowed transitions). */
export function canReach(from: SessionState, to: SessionState): boolean {
  const seen = new Set<SessionState>([from]);
  for (const state of seen) {
    if (state === to) return true;
    for (const next of allowedTransitions[state]) seen.add(next);
  }
  return false;
}

/** The longest an idle or lifetime policy may name: 30 days. */
export const MAX_POLICY_MS = 30 * 24 * 3_600_000;

/**
 * When a session with nothing going on suspends (docs/ports.md, Idle): warm
 * after warmAfterMs without activity, cold after coldAfterMs (both counted
 * from the last activity; a cold one not before the warm one's).
 */
export const IdlePolicy = z
  .object({
    warmAfterMs: z.number().int().min(1_000).max(MAX_POLICY_MS).optional(),
    coldAfterMs: z.number().int().min(1_000).max(MAX_POLICY_MS).optional(),
  })
  .strict();
export type IdlePolicy = z.infer<typeof IdlePolicy>;
export const MaxLifetimeMs = z.number().int().min(1_000).max(MAX_POLICY_MS);


/** A workspace secret's name (env-var style): environments reference them, a repository may authenticate with one. */
export const SecretName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "secret names are env-var style");

/** A repository cloned into the workspace before the session's command starts (docs/workspace.md, Repositories). */
export const RepoRef = z
  .object({
    /** Clone URL of the repository (https, http, git, ssh or file; never with a credential in it: use secretRef). */
    url: z.string().min(1).max(2048),
    /** Branch, tag or commit to check out; the default branch when absent. */
    ref: z.string().min(1).max(256).optional(),
    /** Directory under the workspace to clone into; the URL's last component without `.git` when absent. */
    path: z.string().min(1).max(256).optional(),
    /**
     * A secret of the session's environment (one of its secretRefs) holding
     * a token for an HTTP(S) URL: given to git as an Authorization header
     * through its environment only, never written anywhere.
     */
    secretRef: SecretName.optional(),
  })
  .strict();
export type RepoRef = z.infer<typeof RepoRef>;

export const AppSpec = z
  .object({
    name: Id,
    cmd: z.array(z.string().max(4096)).min(1).max(256),
    /** Whether the app runs in a PTY (default) or with plain stdout/stderr pipes. */
    tty: z.boolean().optional(),
    /** The ports it serves, each reachable at its preview URL (docs/ports.md). */
    ports: PortList.optional(),
  })
  .strict();
export type AppSpec = z.infer<typeof AppSpec>;

/**
 * The portable execution description. Unset means "inherit from the
 * environment"; an explicitly empty list means "none" (PortableSpec rules).
 */
const PortableSpecObject = z
  .object({
    /** Checked against the reference grammar where a client sends it (CreateSessionBody); records keep what they hold. */
    image: z.string().min(1).max(512).optional(),
    cmd: z.array(z.string().max(4096)).min(1).max(256).optional(),
    egressAllow: z.array(z.string().min(1).max(253)).max(256).optional(),
    repos: z.array(RepoRef).max(64).optional(),
    apps: z.array(AppSpec).min(1).max(16).optional(),
    /** The ports of a session without apps (with apps, each app declares its own). */
    ports: PortList.optional(),
  })
  .strict();

/** Ports on apps or on the spec, never both; each port once. */
function refusePortClashes(spec: z.infer<typeof PortableSpecObject>, ctx: z.RefinementCtx): void {
  if (spec.apps !== undefined && spec.ports !== undefined) ctx.addIssue({ code: "custom", path: ["ports"], message: "a session with apps declares its ports on its apps" });
  const seen = new Set<number>();
  for (const { port } of declaredPorts(spec)) {
    if (seen.has(port)) ctx.addIssue({ code: "custom", path: ["ports"], message: `port ${port} is declared twice` });
    seen.add(port);
  }
}

export const PortableSpec = PortableSpecObject.superRefine(refusePortClashes);
export type PortableSpec = z.infer<typeof PortableSpec>;

/** PortableSpec as a client sends it (CreateSessionBody): its image must be a reference a runner can pull. */
export const PortableSpecBody = PortableSpecObject.extend({ image: ImageRef.optional() }).superRefine(refusePortClashes);
export type PortableSpecBody = z.infer<typeof PortableSpecBody>;

export const SessionMode = z.enum(["run", "watch"]);

/** The body of POST /v1/sessions. */
export const CreateSessionBody = z
  .object({
    name: z.string().min(1).max(128).regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/).optional(),
    environmentId: Id.optional(),
    spec: PortableSpecBody,
    repos: z.array(RepoRef).max(64).optional(),
    idempotencyKey: z.string().min(1).max(128).optional(),
    oneShot: z.boolean().optional(),
    /** Over the environment's, field by field. */
    idle: IdlePolicy.optional(),
    /** Over the environment's: the session ends (destroyed) this long after its create. */
    maxLifetimeMs: MaxLifetimeMs.optional(),
    parentId: Id.optional(),
    mode: SessionMode.optional(),
  })
  .strict()
  .superRefine(refuseNulAndDeepNesting);
export type CreateSessionBody = z.infer<typeof CreateSessionBody>;

/** The name of the app a session gets when its spec lists none. */
export const DEFAULT_APP = "main";

/** The main app's command when a session names none (and its image, if any, has no Entrypoint or Cmd). */
export const DEFAULT_CMD: readonly string[] = ["/bin/sh", "-l"];

/**
 * Resolves the apps a session runs: its explicit apps, or one "main" app from
 * cmd. Without a cmd the main app runs `imageCommand` (the image's Entrypoint
 * then Cmd, which only the runner that pulled it knows) when there is one,
 * else DEFAULT_CMD. The apps' names never depend on it.
 */
export function appsOf(spec: PortableSpec, imageCommand?: readonly string[]): AppSpec[] {
  if (spec.apps) return spec.apps;
  const fallback = imageCommand !== undefined && imageCommand.length > 0 ? imageCommand : DEFAULT_CMD;
  return [{ name: DEFAULT_APP, cmd: spec.cmd ?? [...fallback] }];
}

/**
 * The fact a record revision commits. Every write to a session record carries
 * a fresh one, so the KV change feed is the outbox: the event recorder turns
 * each revision into exactly one audit event, with this id as its message id.
 */
export const SessionFact = z
  .object({
    eventId: Id,
    action: z.string().min(1).max(32),
    actorId: Id,
    at: EpochMs,
    /**
     * Usage of the placement generation this fact ends (exit, cold suspend,
     * teardown), carried by exactly one fact per generation.
     */
    usage: Usage.optional(),
    /** On a run fact: the app generation it is about. */
    run: RunRef.optional(),
    /** Why the scheduler took this step by itself (an idle suspend, the lifetime's end). */
    reason: PolicyReason.optional(),
  })
  .strict();
export type SessionFact = z.infer<typeof SessionFact>;

/** A portable, opaque reference to a workspace snapshot (object store `checkpoints` or `env-snapshots`). */
export const Checkpoint = z
  .object({
    /** `<store>/<object name>`; opaque to clients. */
    ref: z.string().min(1).max(512),
    /** Archive format of the object, e.g. "tar+gzip". */
    format: z.string().min(1).max(32),
    /** What a runner needs to boot it ("portable": any runner of the pool). */
    capabilities: z.array(z.string().min(1).max(64)).max(16),
  })
  .strict();
export type Checkpoint = z.infer<typeof Checkpoint>;

/**
 * The key a sealed object (checkpoint, environment snapshot, transfer) was
 * encrypted with: 32 random bytes as base64, one per object. Object stores are
 * readable by every runner, so keys travel only where the one entitled runner
 * (and the scheduler) can read them, and never appear in a record, an API
 * answer, an event or a log.
 */
export const SealKey = z.string().regex(/^[A-Za-z0-9+/]{43}=$/, "must be 32 bytes of base64");
export type SealKey = z.infer<typeof SealKey>;


/** One app's current generation as the record shows it (seed 000's run projection). */
export const AppRun = z
  .object({
    /** Counts from 1; each restart of the app opens the next. */
    generation: z.number().int().positive(),
    phase: z.enum(["running", "completed", "failed"]),
    trigger: RunTrigger,
    exitCode: z.number().int().nullable().optional(),
    /** The signal that ended the generation (a generation killed by one is failed, unless the runner stopped it). */
    signal: z.string().max(32).optional(),
    reason: z.string().max(512).optional(),
    startedAt: EpochMs,
    endedAt: EpochMs.optional(),
  })
  .strict();
export type AppRun = z.infer<typeof AppRun>;


/** An operation the scheduler asked a runner for and is waiting on; it has a deadline. */
export const PendingOp = z
  .object({
    op: z.enum(["suspend_warm", "suspend_cold", "resume_warm", "snapshot", "restart_app"]),
    /** Correlates the runner's answer (snapshot). */
    requestId: Id,
    requestedAt: EpochMs,
  })
  .strict();
export type PendingOp = z.infer<typeof PendingOp>;

/** The runner's refusal of an operation: the request it answered and why (a sentence, never a raw error). */
export const Refusal = z
  .object({
    requestId: Id,
    op: PendingOp.shape.op,
    reason: z.string().max(512),
    at: EpochMs,
  })
  .strict();
export type Refusal = z.infer<typeof Refusal>;

/** The latest snapshot a client asked for, once the runner took it: found by its request even after a later checkpoint. */
export const TakenSnapshot = z
  .object({
    requestId: Id,
    checkpoint: Checkpoint,
    at: EpochMs,
  })
  .strict();
export type TakenSnapshot = z.infer<typeof TakenSnapshot>;

/** The session record stored in KV `sessions` under `<workspace>.<session>`. */
export const Session = z
  .object({
    id: Id,
    workspaceId: Id,
    creatorId: Id,
    name: z.string().optional(),
    state: SessionStateSchema,
    environmentId: Id.optional(),
    spec: PortableSpec,
    mode: SessionMode,
    oneShot: z.boolean(),
    parentId: Id.optional(),
    /** Set by recycle: the session this one replaced. */
    predecessorId: Id.optional(),
    /** Set by recycle: the session that replaced this one (a recycle asked again answers it). */
    successorId: Id.optional(),
    poolId: Id.optional(),
    runnerId: Id.optional(),
    /** Advances by one on every placement; one generation = one sandbox on one runner. */
    placementGeneration: Generation,
    /** Advances by one on every controller attach; input from older ones is dropped. */
    controllerGeneration: Generation,
    idempotencyKey: z.string().optional(),
    /** Exit code of the session's process once it ended by itself. */
    childExitCode: z.number().int().nullable(),
    /** Why the session failed or died; a sentence, never a raw provider error. */
    error: z.string().optional(),
    /** What a runner must offer to take the session; from its environment and host policy, never the request. */
    requirements: Requirements.optional(),
    /** Identity of the environment setup this session was dispatched with. */
    setupHash: z.string().optional(),
    /** The latest checkpoint (cold suspend, snapshot, periodic); a cold resume restores it. */
    checkpoint: Checkpoint.optional(),
    /** When the latest checkpoint was taken. */
    checkpointedAt: EpochMs.optional(),
    /** An operation in flight on the runner, with its own timeout. */
    pending: PendingOp.optional(),
    /** The latest operation the runner refused, with its reason (the API answers that request 409). */
    refusal: Refusal.optional(),
    /** The latest snapshot a client asked for (POST …/snapshot), once taken. */
    snapshot: TakenSnapshot.optional(),
    /** Per-app generations, by app name. */
    apps: z.record(z.string(), AppRun).optional(),
    /** The last placement generation whose usage was recorded (a repeated report is not counted twice). */
    usageGeneration: Generation.optional(),
    /** Its idle policy and lifetime, the session's own over its environment's (at create). */
    idle: IdlePolicy.optional(),
    maxLifetimeMs: MaxLifetimeMs.optional(),
    /** Why it is in its state when a policy put it there (idle, lifetime, drain); cleared when it runs again. */
    stateReason: PolicyReason.optional(),
    /** Its declared ports and their preview URLs (from the spec, at create). */
    ports: z.array(SessionPort).max(16 * MAX_PORTS).optional(),
    /** When the session last became idle (no attached client); watch sessions suspend after idleMs. */
    idleSince: EpochMs.optional(),
    createdAt: EpochMs,
    updatedAt: EpochMs,
    lastFact: SessionFact,
  })
  .strict();
export type Session = z.infer<typeof Session>;

/**
 * Whether a caller may know of a session at all. A session's own token knows
 * its session and the sessions it created (its roster), nothing else of the
 * workspace: checked by every reader of records (the scheduler, the
 * gateway), beside the gateway's Authorizer, so no path shows it another session.
 */
export function visibleTo(scope: Scope, s: Session): boolean {
  if (s.workspaceId !== scope.workspaceId) return false;
  return scope.sessionId === undefined || s.id === scope.sessionId || s.creatorId === scope.actor.id;
}

export function sessionKey(workspaceId: string, sessionId: string): string {
  return `${workspaceId}.${sessionId}`;
}
