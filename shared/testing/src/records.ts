/**
 * Record fixtures: a valid Session, Runner or Environment with test defaults,
 * overridden field by field and parsed by its contract schema, so a fixture
 * can never drift from the record the services actually store.
 */
import { Environment, NO_REQUIREMENTS, Runner, Session } from "@paddock/contracts";

/** The fixed clock every fixture is stamped with. */
export const FIXTURE_NOW = 1_700_000_000_000;

/** Drops explicitly undefined overrides, so they keep the default instead of erasing it. */
function defined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

export function makeSession(overrides: Partial<Session> = {}): Session {
  const o = defined(overrides);
  const id = o.id ?? "s1";
  return Session.parse({
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
    lastFact: { eventId: `evt-${id}`, action: "create", actorId: o.creatorId ?? "dev", at: FIXTURE_NOW },
    ...o,
  });
}

export function makeRunner(overrides: Partial<Runner> = {}): Runner {
  return Runner.parse({
    id: "r1",
    poolId: "default",
    state: "active",
    generation: 1,
    capacityUsed: 0,
    capacityTotal: 4,
    capabilities: [],
    registeredAt: FIXTURE_NOW,
    lastSeenAt: FIXTURE_NOW,
    ...defined(overrides),
  });
}

export function makeEnvironment(overrides: Partial<Environment> = {}): Environment {
  const o = defined(overrides);
  const id = o.id ?? "env1";
  return Environment.parse({
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
    ...o,
  });
}
