/**
 * Garbage collection of checkpoint chunks (docs/decisions/0062). A chunk
 * lives while a manifest the object pass keeps (named by a live record, or
 * younger than the grace) names it. Manifests are sealed: the collector opens
 * each with its key (it holds them all) once, and remembers its chunks by ref
 * (a manifest never changes).
 *
 * A chunk no kept manifest names is deleted only once this replica has seen
 * it unnamed for the whole grace period: a runner stores a checkpoint's new
 * chunks before its manifest, and builds on chunks of the checkpoint the
 * command named, which a newer manifest names by the time that one is
 * superseded. A manifest without a stored key names nothing anyone can
 * restore; one with a key that cannot be opened stops the pass (what it names
 * is unknown, so nothing is deleted).
 */
import { Readable } from "node:stream";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { gunzipSync } from "node:zlib";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Objm, type ObjectStore } from "@nats-io/obj";
import { sealKeyFrom, unsealed } from "@paddock/archive";
import { isStreamNotFound } from "@paddock/bus";
import { CheckpointManifest, manifestChunkRefs, runnerChunkStream } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { SealKeys } from "../state/seal-keys.ts";

export interface ChunkGcDeps {
  nc: NatsConnection;
  sealKeys: SealKeys;
  now: () => number;
  graceMs: number;
  log: Logger;
  /** Counts deleted chunks. */
  onCollected?: (count: number) => void;
}

export interface ChunkGc {
  /** Deletes the chunks of runners' streams that none of manifests names (refs of kept manifest objects). */
  run(manifests: Iterable<string>, runners: Iterable<{ poolId: string; id: string }>): Promise<{ deletedChunks: number }>;
}

export class ManifestUnreadableError extends Error {
  readonly code = "manifest_unreadable";
  constructor(ref: string, options?: ErrorOptions) {
    super(`manifest ${ref} could not be opened: no chunk is collected this pass`, options);
    this.name = "ManifestUnreadableError";
  }
}

export function createChunkGc(deps: ChunkGcDeps): ChunkGc {
  const objm = new Objm(deps.nc);
  const chunksOf = new Map<string, Set<string>>();
  /** Chunk ref → when this replica first saw no kept manifest name it. */
  const unnamedSince = new Map<string, number>();
  const stores = new Map<string, ObjectStore>();

  /** The chunks ref names; none when its key is not stored (yet): a record names a manifest only after its key is stored, so nothing can restore it. */
  async function readManifest(ref: string): Promise<Set<string>> {
    const cached = chunksOf.get(ref);
    if (cached) return cached;
    const slash = ref.indexOf("/");
    const [storeName, name] = [ref.slice(0, slash), ref.slice(slash + 1)];
    const key = await deps.sealKeys.get(ref);
    if (key === undefined) return new Set();
    try {
      let store = stores.get(storeName);
      if (!store) stores.set(storeName, (store = await objm.open(storeName)));
      const got = await store.get(name);
      if (!got) throw new Error("object gone");
      const parts: Buffer[] = [];
      for await (const part of unsealed(Readable.fromWeb(got.data as NodeWebReadableStream<Uint8Array>), sealKeyFrom(key), ref)) parts.push(part as Buffer);
      const refs = manifestChunkRefs(CheckpointManifest.parse(JSON.parse(gunzipSync(Buffer.concat(parts)).toString("utf8"))));
      chunksOf.set(ref, refs);
      return refs;
    } catch (err) {
      throw new ManifestUnreadableError(ref, { cause: err });
    }
  }

  async function run(manifests: Iterable<string>, runners: Iterable<{ poolId: string; id: string }>): Promise<{ deletedChunks: number }> {
    const named = new Set<string>();
    const kept = new Set(manifests);
    for (const ref of kept) for (const chunk of await readManifest(ref)) named.add(chunk);
    for (const ref of chunksOf.keys()) if (!kept.has(ref)) chunksOf.delete(ref);
    const jsm = await jetstreamManager(deps.nc);
    const now = deps.now();
    const seen = new Set<string>();
    let deletedChunks = 0;
    for (const r of runners) {
      const stream = runnerChunkStream(r.poolId, r.id);
      const info = await jsm.streams.info(stream, { subjects_filter: ">" }).catch((err: unknown) => {
        if (isStreamNotFound(err)) return undefined;
        throw err;
      });
      for (const subject of Object.keys(info?.state.subjects ?? {})) {
        const chunk = `${stream}/${subject.slice(subject.lastIndexOf(".") + 1)}`;
        seen.add(chunk);
        if (named.has(chunk)) {
          unnamedSince.delete(chunk);
          continue;
        }
        const since = unnamedSince.get(chunk) ?? now;
        unnamedSince.set(chunk, since);
        if (now - since < deps.graceMs) continue;
        await jsm.streams.purge(stream, { filter: subject });
        unnamedSince.delete(chunk);
        deletedChunks += 1;
      }
    }
    for (const chunk of unnamedSince.keys()) if (!seen.has(chunk)) unnamedSince.delete(chunk);
    if (deletedChunks > 0) {
      deps.onCollected?.(deletedChunks);
      deps.log.info({ chunks: deletedChunks }, "checkpoint chunks collected");
    }
    return { deletedChunks };
  }

  return { run };
}
