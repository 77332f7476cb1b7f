/**
 * Garbage collection of checkpoint objects. Runners write a new object for
 * every checkpoint (cold suspend, snapshot, periodic) and every environment
 * snapshot; records keep only the latest. Without this pass every superseded
 * object, and every object of a session that ended, stays in the object store
 * forever together with its seal key.
 *
 * What is kept: the checkpoint of every non-terminal session record and the
 * snapshot of every live environment, plus anything younger than the grace
 * period. The grace covers an object whose fact is still on its way (a runner
 * stores the object, then reports it) and views that lag another replica's
 * write. Every replica may run the pass; deletes are idempotent.
 */
import type { ObjectStore } from "@nats-io/obj";
import { Objm } from "@nats-io/obj";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { isStreamNotFound } from "@paddock/bus";
import { isTerminal, MANIFEST_FORMAT, objectStoreKind, ObjectStores, runnerObjectStore, type Checkpoint, type Environment, type Session } from "@paddock/contracts";
import { createChunkGc } from "./chunk-gc.ts";
import type { Logger } from "@paddock/logging";
import type { SealKeys } from "../state/seal-keys.ts";
import type { CheckpointGcMetrics } from "../metrics.ts";

/** The shared (legacy) stores whose objects are sealed checkpoints referenced from records; each runner also has its own (`runnerObjectStore`). */
export const COLLECTED_STORES = [ObjectStores.checkpoints, ObjectStores.envSnapshots] as const;

export interface CheckpointGcDeps {
  nc: NatsConnection;
  sealKeys: SealKeys;
  /** Every session record the replica's view holds. */
  sessions: () => Iterable<Session>;
  /** Every live environment record. */
  environments: () => Iterable<Environment>;
  /** Every runner record the replica's view holds: each has its own stores to collect. */
  runners: () => Iterable<{ poolId: string; id: string }>;
  now: () => number;
  /** Objects and keys younger than this are never collected (ms). */
  graceMs: number;
  metrics: CheckpointGcMetrics;
  log: Logger;
}

/** What one pass removed. */
export interface CheckpointGcResult {
  deletedObjects: string[];
  deletedOrphanKeys: number;
  /** Chunks of incremental checkpoints no kept manifest names any more (chunk-gc.ts). */
  deletedChunks: number;
}

/** The checkpoints a live record may still restore from. */
function referencedCheckpoints(sessions: Iterable<Session>, environments: Iterable<Environment>): Checkpoint[] {
  const found: Checkpoint[] = [];
  for (const s of sessions) if (s.checkpoint && !isTerminal(s.state)) found.push(s.checkpoint);
  for (const e of environments) if (e.snapshot) found.push(e.snapshot);
  return found;
}

/** Refs (`<store>/<name>`) a live record may still restore from. */
export function referencedRefs(sessions: Iterable<Session>, environments: Iterable<Environment>): Set<string> {
  return new Set(referencedCheckpoints(sessions, environments).map((c) => c.ref));
}

/** The stores to collect: the shared ones and every known runner's own. */
function collectedStores(runners: Iterable<{ poolId: string; id: string }>): string[] {
  const names: string[] = [...COLLECTED_STORES];
  for (const r of runners) for (const kind of COLLECTED_STORES) names.push(runnerObjectStore(kind, r.poolId, r.id));
  return names;
}

export function createCheckpointGc(deps: CheckpointGcDeps): { run(): Promise<CheckpointGcResult> } {
  const objm = new Objm(deps.nc);
  const stores = new Map<string, Promise<ObjectStore | undefined>>();
  // A runner's stores exist once it provisioned them (before registering); one
  // that never did is skipped, never created here (only the runner may).
  const open = (name: string): Promise<ObjectStore | undefined> => {
    const cached = stores.get(name);
    if (cached) return cached;
    const opening = (async () => {
      const jsm = await jetstreamManager(deps.nc);
      const exists = await jsm.streams.info(`OBJ_${name}`).then(
        () => true,
        (err: unknown) => {
          if (isStreamNotFound(err)) return false;
          throw err;
        },
      );
      return exists ? objm.open(name) : undefined;
    })();
    stores.set(name, opening);
    opening.then((os) => os ?? stores.delete(name)).catch(() => stores.delete(name));
    return opening;
  };

  const chunks = createChunkGc({ nc: deps.nc, sealKeys: deps.sealKeys, now: deps.now, graceMs: deps.graceMs, log: deps.log, onCollected: (n) => deps.metrics.chunks.inc(n) });

  async function run(): Promise<CheckpointGcResult> {
    const deletedObjects: string[] = [];
    const existing = new Set<string>();
    // The reference set is taken before listing: an object listed afterwards
    // that a newer record names is young, and the grace keeps it.
    const checkpoints = referencedCheckpoints(deps.sessions(), deps.environments());
    const live = new Set(checkpoints.map((c) => c.ref));
    // Manifests whose chunks stay: every live one (wherever it is stored) and every kept one listed below.
    const manifests = new Set(checkpoints.filter((c) => c.format === MANIFEST_FORMAT).map((c) => c.ref));
    const oldBefore = deps.now() - deps.graceMs;
    for (const storeName of collectedStores(deps.runners())) {
      const store = await open(storeName);
      if (!store) continue;
      for (const info of await store.list()) {
        const ref = `${storeName}/${info.name}`;
        const writtenAt = Date.parse(info.mtime);
        if (live.has(ref) || !(writtenAt <= oldBefore)) {
          existing.add(ref);
          if (info.description === MANIFEST_FORMAT) manifests.add(ref);
          continue;
        }
        await store.delete(info.name);
        // The key after the object: a key without its object is harmless and collected below.
        await deps.sealKeys.delete(ref);
        deps.metrics.collected.inc({ store: objectStoreKind(storeName) ?? storeName });
        deletedObjects.push(ref);
      }
    }
    let deletedOrphanKeys = 0;
    for await (const record of deps.sealKeys.all()) {
      if (existing.has(record.ref) || live.has(record.ref) || record.storedAt > oldBefore) continue;
      await deps.sealKeys.delete(record.ref);
      deps.metrics.orphanKeys.inc();
      deletedOrphanKeys += 1;
    }
    if (deletedObjects.length > 0 || deletedOrphanKeys > 0) deps.log.info({ objects: deletedObjects.length, orphanKeys: deletedOrphanKeys }, "checkpoint objects collected");
    const { deletedChunks } = await chunks.run(manifests, deps.runners());
    return { deletedObjects, deletedOrphanKeys, deletedChunks };
  }

  return { run };
}
