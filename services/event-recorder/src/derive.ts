import { createHash } from "node:crypto";
import {
  AuditActionSchema,
  FLEET_WORKSPACE,
  PaddockError,
  ZERO_USAGE,
  type AgentFact,
  type AuditEvent,
  type Environment,
  type Runner,
  type Session,
  type SessionFact,
} from "@paddock/contracts";

/**
 * Runner (fleet) events are filed under the reserved FLEET_WORKSPACE: runners
 * belong to no workspace. Their subject is `paddock.audit.fleet.runner.<runnerId>`.
 */
export { FLEET_WORKSPACE };

/** The actor of fleet facts the scheduler decides by itself (lost, drain/cordon state as recorded). */
export const FLEET_ACTOR = "scheduler";

function actionOf(fact: SessionFact): AuditEvent["action"] {
  const action = AuditActionSchema.safeParse(fact.action);
  if (!action.success) throw new PaddockError("invalid", "record carries an unknown action");
  return action.data;
}

/**
 * The audit event a session revision commits. The record carries its own
 * fact (lastFact), so the event is derived from one write, never a second
 * independent one that could be lost. Only the fixed fields are copied.
 */
export function sessionEvent(s: Session): AuditEvent {
  return {
    id: s.lastFact.eventId,
    workspaceId: s.workspaceId,
    actorId: s.lastFact.actorId,
    action: actionOf(s.lastFact),
    resource: { kind: "session", workspaceId: s.workspaceId, id: s.id, creatorId: s.creatorId },
    at: s.lastFact.at,
    // Usage rides on the one fact that ends a generation, so summing events never counts it twice.
    usage: s.lastFact.usage ?? ZERO_USAGE,
    placementGeneration: s.lastFact.usage ? (s.usageGeneration ?? s.placementGeneration) : s.placementGeneration,
    // A run fact names its app generation (app, generation, trigger, exit code, signal): never output or a reason.
    ...(s.lastFact.run ? { run: { ...s.lastFact.run } } : {}),
    ...(s.lastFact.reason ? { reason: s.lastFact.reason } : {}),
  };
}

/** The workspace and session of an AGENTS subject (`paddock.agents.<workspace>.<session>`); undefined when it is not one. */
export function parseAgentsSubject(subject: string): { workspaceId: string; sessionId: string } | undefined {
  const parts = subject.split(".");
  if (parts.length !== 4 || parts[0] !== "paddock" || parts[1] !== "agents") return undefined;
  return { workspaceId: parts[2] as string, sessionId: parts[3] as string };
}

/**
 * The audit event of one agent fact: which agent did what, and on a turn the
 * tokens it reported as `usage.agentTokenCount`, under the placement
 * generation it was reported in. The fact's id is the event's: one event per
 * fact, whoever records it. No claim text (model, harness, tmux name) is copied.
 */
export function agentEvent(fact: AgentFact, where: { workspaceId: string; sessionId: string }): AuditEvent {
  return {
    id: fact.id,
    workspaceId: where.workspaceId,
    actorId: fact.actorId,
    action: `agent.${fact.type}`,
    resource: { kind: "session", workspaceId: where.workspaceId, id: where.sessionId, creatorId: fact.creatorId },
    at: fact.at,
    usage: fact.type === "turn" && fact.tokens ? { ...ZERO_USAGE, agentTokenCount: fact.tokens } : ZERO_USAGE,
    placementGeneration: fact.placementGeneration,
    agent: { id: fact.agentId, ...(fact.type === "resume" ? { successorId: fact.successorId } : {}), ...(fact.type === "turn" ? { turn: fact.event } : {}) },
  };
}

/**
 * The audit event an environment revision commits. An environment has no
 * creator of its own (it belongs to its workspace), so `creatorId` is the
 * workspace id. Setup, init, secret names, connectors and egress are never copied.
 */
export function environmentEvent(e: Environment): AuditEvent {
  return {
    id: e.lastFact.eventId,
    workspaceId: e.workspaceId,
    actorId: e.lastFact.actorId,
    action: actionOf(e.lastFact),
    resource: { kind: "environment", workspaceId: e.workspaceId, id: e.id, creatorId: e.workspaceId },
    at: e.lastFact.at,
    usage: ZERO_USAGE,
    placementGeneration: 0,
  };
}

/**
 * The deterministic event id of one revision of a runner record: the KV
 * revision (the bucket stream's sequence, unique across the bucket) plus a
 * digest of the key, so a redelivered revision republishes the same id and
 * AUDIT drops it. Always a valid Id (≤ 64 of [A-Za-z0-9_-]).
 */
export function runnerEventId(poolId: string, runnerId: string, revision: number): string {
  const digest = createHash("sha256").update(`${poolId}\0${runnerId}`).digest("hex").slice(0, 16);
  return `evt_runner_${String(revision)}_${digest}`;
}

export type RunnerDerivation =
  | { kind: "event"; event: AuditEvent }
  /** A revision that commits no fact (capacity, reservation or repair only). */
  | { kind: "none" }
  /** The previous revision is no longer retained, so what changed cannot be told. */
  | { kind: "gap" };

/**
 * What a revision of a runner record commits, from it and the previous
 * revision of the same key (undefined: none retained, or a delete marker):
 * - generation increased (or the first record of the key) → `register`
 *   (a re-registration fences the older generation; a refused stale claim
 *   writes nothing, so it is no revision and no event);
 * - state became `lost` → `lose`;
 * - state became active, draining or cordoned → `update`;
 * - anything else (capacity, reservation, repair) → no event.
 * `writtenAt` is the revision's stream timestamp (the record keeps no time of
 * its own for state changes), so a redelivery derives the same event.
 */
export function runnerEvent(prev: Runner | undefined, cur: Runner, revision: number, writtenAt: number): RunnerDerivation {
  let action: AuditEvent["action"] | undefined;
  let actorId = FLEET_ACTOR;
  if (!prev) {
    // No retained previous revision: the key's first record is the first
    // registration (registeredAt and lastSeenAt are set from one clock read).
    if (cur.registeredAt !== cur.lastSeenAt) return { kind: "gap" };
    action = "register";
  } else if (cur.generation > prev.generation) {
    action = "register";
  } else if (cur.state !== prev.state) {
    action = cur.state === "lost" ? "lose" : "update";
  }
  if (!action) return { kind: "none" };
  if (action === "register") actorId = cur.id;
  return {
    kind: "event",
    event: {
      id: runnerEventId(cur.poolId, cur.id, revision),
      workspaceId: FLEET_WORKSPACE,
      actorId,
      action,
      resource: { kind: "runner", workspaceId: FLEET_WORKSPACE, id: cur.id, creatorId: FLEET_ACTOR },
      at: writtenAt,
      usage: ZERO_USAGE,
      placementGeneration: 0,
    },
  };
}
