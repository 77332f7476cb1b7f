/**
 * Record fixtures: a valid Session, Runner, Environment or AuditEvent with test defaults,
 * overridden field by field and parsed by its contract schema, so a fixture
 * can never drift from the record the services actually store.
 */
import { AuditEvent, Environment, NO_REQUIREMENTS, Runner, Session, ZERO_USAGE } from "@paddock/contracts";

/** The fixed clock every fixture is stamped with. */
export const FIXTURE_NOW = 1_700_000_000_000;

/** Field overrides; an explicit undefined removes an optional field the defaults set. */
export type Overrides<T> = { [K in keyof T]?: T[K] | undefined };

/** The defaults with the overrides laid over them, an undefined override removing its field. */
function merge<T extends object>(defaults: T, overrides: Overrides<T>): Record<string, unknown> {
  const out = { ...defaults } as Record<string, unknown>;
  for (const [k, v] of Object.entries(overrides)) {
    if (v === undefined) delete out[k];
    else out[k] = v;
  }
  return out;
}

export function makeSession(overrides: Overrides<Session> = {}): Session {
  const id = overrides.id ?? "s1";
  const defaults: Session = {
    id,
    workspaceId: "default",
    creatorId: "dev",
    state: "running",
    spec: {},
    mode: "run",
    oneShot: false,
    poolId: "default",
    runnerId: "r1",
    placementGeneration: 1,
    controllerGeneration: 0,
    childExitCode: null,
    createdAt: FIXTURE_NOW,
    updatedAt: FIXTURE_NOW,
    lastFact: { eventId: `evt-${id}`, action: "create", actorId: overrides.creatorId ?? "dev", at: FIXTURE_NOW },
  };
  return Session.parse(merge(defaults, overrides));
}

export function makeRunner(overrides: Overrides<Runner> = {}): Runner {
  const defaults: Runner = {
    id: "r1",
    poolId: "default",
    state: "active",
    generation: 1,
    capacityUsed: 0,
    capacityTotal: 4,
    capabilities: [],
    registeredAt: FIXTURE_NOW,
    lastSeenAt: FIXTURE_NOW,
  };
  return Runner.parse(merge(defaults, overrides));
}

export function makeEnvironment(overrides: Overrides<Environment> = {}): Environment {
  const id = overrides.id ?? "env1";
  const defaults: Environment = {
    id,
    workspaceId: "default",
    name: id,
    setupHash: "0".repeat(64),
    egressAllow: [],
    secretRefs: [],
    connectors: [],
    requirements: NO_REQUIREMENTS,
    createdAt: FIXTURE_NOW,
    updatedAt: FIXTURE_NOW,
    lastFact: { eventId: `evt-${id}`, action: "create", actorId: "dev", at: FIXTURE_NOW },
  };
  return Environment.parse(merge(defaults, overrides));
}

/** A session's `create` event by alice, in `workspaceId`, with id `id`. */
export function makeAuditEvent(overrides: Overrides<AuditEvent> & { sessionId?: string } = {}): AuditEvent {
  const { sessionId = "s1", ...rest } = overrides;
  const workspaceId = rest.workspaceId ?? "default";
  const defaults: AuditEvent = {
    id: "evt1",
    workspaceId,
    actorId: "alice",
    action: "create",
    resource: { kind: "session", workspaceId, id: sessionId, creatorId: "alice" },
    at: 1,
    usage: ZERO_USAGE,
    placementGeneration: 0,
  };
  return AuditEvent.parse(merge(defaults, rest));
}
