import { Readable } from "node:stream";
import { gunzipSync, gzipSync } from "node:zlib";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import type { NatsConnection } from "@nats-io/transport-node";
import { Objm, setSha256Backend, type ObjectStore } from "@nats-io/obj";
import { ArchiveRejectedError, DirFd, newSealKey, SealError, SEALED_ARCHIVE_FORMAT, SEALED_TAR_FORMAT, sealed, sealKeyFrom, unsealed } from "@paddock/archive";
import { CheckpointManifest, MANIFEST_FORMAT, objectStoreKind, ObjectStores, runnerObjectStore, type Checkpoint, type RunnerObjectKind, type SealKey } from "@paddock/contracts";
import { createChunkStore } from "./chunk-store.ts";
import { ChunkFiller, type FileFiller } from "./chunk-fill.ts";
import { buildManifest, Lineages, restoreManifest, type ManifestStats } from "./incremental.ts";
import { extractArchive, packDirectory } from "./archive.ts";
import type { SandboxUser } from "../sandbox/backend.ts";
import { ArchiveRefusedError, CheckpointError } from "../errors.ts";

/** The kinds of stores a checkpoint may live in (not `transfers`, which only holds archives in transit). */
export type StoreName = RunnerObjectKind;

/** A session checkpoint's object name: one per placement and request. */
export function checkpointObjectName(workspaceId: string, sessionId: string, placementGeneration: number, requestId: string): string {
  return `${workspaceId}/${sessionId}/${placementGeneration}-${requestId}`;
}

/** An environment snapshot's object name: one per setup identity. */
export function envSnapshotObjectName(workspaceId: string, environmentId: string, setupHash: string): string {
  return `${workspaceId}/${environmentId}/${setupHash}`;
}

/** Splits `<store>/<object name>`; the prefix picks the bucket (a runner's own store of a kind, or the shared legacy one). */
export function parseCheckpointRef(ref: string): { store: string; name: string } {
  const slash = ref.indexOf("/");
  const store = slash > 0 ? ref.slice(0, slash) : "";
  const name = ref.slice(slash + 1);
  if (objectStoreKind(store) === undefined || slash < 0 || name.length === 0) throw new CheckpointError("checkpoint ref names no known store");
  return { store, name };
}

/** A stored checkpoint and the key it was sealed with (reported to the scheduler only, never logged). */
export interface SavedCheckpoint {
  checkpoint: Checkpoint;
  sealKey: SealKey;
}

export interface CheckpointStore {
  /**
   * Stores workspace, sealed with a fresh key, into this runner's own store of that kind under name: as a manifest of
   * chunks (only what changed since the first of `base` this workspace holds an index of), or as a tar (gzipped unless
   * compression is none). With user (the session's, where not the runner's), only files that user owns are stored.
   */
  save(store: StoreName, name: string, workspace: string, user?: SandboxUser, base?: readonly string[]): Promise<SavedCheckpoint>;
  /** Writes the checkpoint out of its store, opening it with its key, into workspace (which must exist); what it makes belongs to user when set. */
  restore(checkpoint: Checkpoint, sealKey: SealKey | undefined, workspace: string, user?: SandboxUser): Promise<void>;
  /** Drops what it knows of workspace (its sandbox is gone). */
  forget(workspace: string): void;
}

/** How checkpoints are stored: manifests of chunks (incremental, the default) or whole tars (every checkpoint copies everything). */
export const CheckpointFormat = { manifest: "manifest", tar: "tar" } as const;
export type CheckpointFormat = (typeof CheckpointFormat)[keyof typeof CheckpointFormat];

export interface CheckpointStoreOptions {
  /** The tar format's compression. */
  compression?: CheckpointCompression;
  format?: CheckpointFormat;
  /** The wall clock file times are compared with (tests move it). */
  now?: () => number;
  /** Told what each manifest checkpoint read and stored. */
  onManifest?: (stats: ManifestStats) => void;
  /** Writes large restores' bytes (the runner's restore workers, fill-worker-host.ts); absent: every restore is fetched and written on this thread. */
  filler?: FileFiller;
  /** The chunks a manifest restore names at least to go to filler (RESTORE_WORKERS_MIN_CHUNKS when absent). */
  fillerMinChunks?: number | undefined;
}

/**
 * A manifest restore of this many chunks goes to the restore workers. Their
 * start (two threads, two connections) is ~0.1 s to a first answer bundled
 * and ~0.25 s from source; on the event loop each chunk costs its fetch and
 * opening, and past ~64 MB the chunks' memory sets off collections of the
 * runner's heap. Measured on another runner, alternated, from source, event
 * loop beside workers: 100 chunks (100 MB) 0.44–0.56 s beside 0.84–0.89 s,
 * 256 (256 MB) 0.93–0.97 s beside 1.10–1.15 s, 1,024 (1 GB) 5.7–5.8 s beside
 * 4.0–4.4 s, 20,480 of 4 KiB (84 MB of small files) 5.1–5.2 s beside 4.0 s.
 */
export const RESTORE_WORKERS_MIN_CHUNKS = 512;

/**
 * Chunk size of a checkpoint object. Each chunk is one acknowledged publish
 * and the store sends them one at a time, so fewer, larger chunks mean fewer
 * round trips; half the default max_payload leaves room for any headers.
 */
const CHECKPOINT_CHUNK_BYTES = 512 * 1024;

/** How checkpoints are packed: gzip (smaller objects) or none (no deflate on either side; faster where the store is near). */
export const CheckpointCompression = { gzip: "gzip", none: "none" } as const;
export type CheckpointCompression = (typeof CheckpointCompression)[keyof typeof CheckpointCompression];

/** The format each compression writes; restore reads either, whatever this runner writes. */
const formats: Record<CheckpointCompression, string> = { gzip: SEALED_ARCHIVE_FORMAT, none: SEALED_TAR_FORMAT };

/**
 * Checkpoints in the NATS object stores. Neither direction holds the archive
 * in memory: the tar is produced, sealed and stored as the store reads it, and
 * opened and extracted as chunks arrive. A runner writes only into its own
 * stores (`runnerObjectStore`; NATS permissions keep every other runner from
 * writing or deleting there) and reads any runner's (a takeover restores from
 * the previous holder's checkpoint). Every runner can read every object, so
 * each is sealed with a key of its own (`@paddock/archive` sealed.ts) bound to
 * its ref: another runner reads nothing from it.
 */
export function createCheckpointStore(nc: NatsConnection, owner: { poolId: string; runnerId: string }, opts: CheckpointStoreOptions = {}): CheckpointStore {
  const compression = opts.compression ?? CheckpointCompression.gzip;
  const chunks = createChunkStore(nc, owner);
  const inThread = new ChunkFiller((chunk) => chunks.fetch(chunk));
  const fillerFor = (manifest: CheckpointManifest): FileFiller => {
    const chunkCount = manifest.entries.reduce((n, e) => n + (e.type === "file" ? e.chunks.length : 0), 0);
    return opts.filler && chunkCount >= (opts.fillerMinChunks ?? RESTORE_WORKERS_MIN_CHUNKS) ? opts.filler : inThread;
  };
  const lineages = new Lineages();
  // The object store digests every chunk (put and get); its default is a
  // pure-JS SHA-256, several times slower than node:crypto on large objects.
  setSha256Backend("native");
  const objm = new Objm(nc);
  const own = new Set([ObjectStores.checkpoints, ObjectStores.envSnapshots].map((kind) => runnerObjectStore(kind, owner.poolId, owner.runnerId)));
  const opened = new Map<string, Promise<ObjectStore>>();
  const open = (store: string): Promise<ObjectStore> => {
    let os = opened.get(store);
    if (!os) {
      // Its own stores are made where missing (provisioned at start; tests may skip that); another runner's only opened.
      os = own.has(store) ? objm.create(store) : objm.open(store);
      // A failed open is retried next time rather than cached.
      os.catch(() => opened.delete(store));
      opened.set(store, os);
    }
    return os;
  };
  /** A manifest of workspace (what changed since base), gzipped and sealed into the object store like a tar. */
  const saveManifest = async (os: ObjectStore, name: string, ref: string, key: Buffer, workspace: string, user: SandboxUser | undefined, base: readonly string[]) => {
    const root = DirFd.open(workspace, { follow: false });
    let built;
    try {
      built = await buildManifest(root, user, chunks, lineages.find(workspace, base), opts.now);
    } finally {
      root.close();
    }
    // Refused now rather than at a restore: a tree the manifest cannot describe (a path past its bound) is no checkpoint.
    if (!CheckpointManifest.safeParse(built.manifest).success) throw new CheckpointError("the workspace holds a path a checkpoint cannot keep");
    const body = sealed(Readable.from([gzipSync(JSON.stringify(built.manifest))]), key, ref);
    // The description tells the collector which objects name chunks (it opens those to keep their chunks).
    await os.put({ name, description: MANIFEST_FORMAT, options: { max_chunk_size: CHECKPOINT_CHUNK_BYTES } }, Readable.toWeb(body) as unknown as ReadableStream<Uint8Array>);
    lineages.remember(workspace, ref, built.index);
    opts.onManifest?.(built.stats);
  };
  const readManifest = async (data: NodeWebReadableStream<Uint8Array>, key: SealKey, ref: string): Promise<CheckpointManifest> => {
    const parts: Buffer[] = [];
    for await (const part of unsealed(Readable.fromWeb(data), sealKeyFrom(key), ref)) parts.push(part as Buffer);
    const parsed = CheckpointManifest.safeParse(JSON.parse(gunzipSync(Buffer.concat(parts)).toString("utf8")));
    if (!parsed.success) throw new CheckpointError("checkpoint manifest is invalid");
    return parsed.data;
  };
  return {
    forget: (workspace) => lineages.forget(workspace),
    save: async (kind, name, workspace, user, base = []) => {
      const store = runnerObjectStore(kind, owner.poolId, owner.runnerId);
      const ref = `${store}/${name}`;
      const key = newSealKey();
      if (opts.format !== CheckpointFormat.tar) {
        try {
          await saveManifest(await open(store), name, ref, key, workspace, user, base);
        } catch (err) {
          if (err instanceof CheckpointError) throw err;
          throw new CheckpointError("checkpoint could not be stored", { cause: err });
        }
        return { checkpoint: { ref, format: MANIFEST_FORMAT, capabilities: ["portable"] }, sealKey: key.toString("base64") };
      }
      try {
        const os = await open(store);
        // The workspace itself swapped for a link by the sandbox is refused, not followed.
        const archive = packDirectory(workspace, { gzip: compression === CheckpointCompression.gzip, followRoot: false, owner: user });
        const body = sealed(Readable.fromWeb(archive as NodeWebReadableStream<Uint8Array>), key, ref);
        await os.put({ name, options: { max_chunk_size: CHECKPOINT_CHUNK_BYTES } }, Readable.toWeb(body) as unknown as ReadableStream<Uint8Array>);
      } catch (err) {
        throw new CheckpointError("checkpoint could not be stored", { cause: err });
      }
      return { checkpoint: { ref, format: formats[compression], capabilities: ["portable"] }, sealKey: key.toString("base64") };
    },
    restore: async (checkpoint, sealKey, workspace, user) => {
      const manifest = checkpoint.format === MANIFEST_FORMAT;
      const gzip = checkpoint.format === SEALED_ARCHIVE_FORMAT;
      if (!manifest && !gzip && checkpoint.format !== SEALED_TAR_FORMAT) throw new CheckpointError(`unsupported checkpoint format ${checkpoint.format.slice(0, 32)}`);
      if (sealKey === undefined) throw new CheckpointError("checkpoint key missing");
      const { store, name } = parseCheckpointRef(checkpoint.ref);
      let result;
      try {
        const os = await open(store);
        result = await os.get(name);
      } catch (err) {
        throw new CheckpointError("checkpoint could not be read", { cause: err });
      }
      if (!result) throw new CheckpointError("checkpoint not found");
      if (manifest) {
        try {
          const read = await readManifest(result.data as NodeWebReadableStream<Uint8Array>, sealKey, checkpoint.ref);
          if (await result.error) throw new CheckpointError("checkpoint is corrupt");
          lineages.remember(workspace, checkpoint.ref, await restoreManifest(read, workspace, user, fillerFor(read)));
        } catch (err) {
          if (err instanceof CheckpointError) throw err;
          if (err instanceof ArchiveRejectedError || err instanceof SealError) throw new CheckpointError(err.message, { cause: err });
          throw new CheckpointError("checkpoint could not be restored", { cause: err });
        }
        return;
      }
      try {
        const opened = unsealed(Readable.fromWeb(result.data as NodeWebReadableStream<Uint8Array>), sealKeyFrom(sealKey), checkpoint.ref);
        await extractArchive(opened, workspace, undefined, { gzip, followRoot: false, owner: user });
      } catch (err) {
        // A refused entry or a sealed object that does not open says why; a transfer error stays generic.
        if (err instanceof ArchiveRefusedError || err instanceof SealError) throw new CheckpointError(err.message, { cause: err });
        throw new CheckpointError("checkpoint could not be restored", { cause: err });
      }
      // Set when the chunks did not match the stored digest.
      if (await result.error) throw new CheckpointError("checkpoint is corrupt");
    },
  };
}
