import { Readable } from "node:stream";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import type { NatsConnection } from "@nats-io/transport-node";
import { Objm, setSha256Backend, type ObjectStore } from "@nats-io/obj";
import { ObjectStores, type Checkpoint } from "@paddock/contracts";
import { ARCHIVE_FORMAT, extractArchive, packDirectory } from "./archive.ts";
import { ArchiveRefusedError, CheckpointError } from "./errors.ts";

/** The stores a checkpoint may live in (not `transfers`, which only holds archives in transit). */
export type StoreName = typeof ObjectStores.checkpoints | typeof ObjectStores.envSnapshots;

const storeNames: ReadonlySet<string> = new Set([ObjectStores.checkpoints, ObjectStores.envSnapshots]);

/** A session checkpoint's object name: one per placement and request. */
export function checkpointObjectName(workspaceId: string, sessionId: string, placementGeneration: number, requestId: string): string {
  return `${workspaceId}/${sessionId}/${placementGeneration}-${requestId}`;
}

/** An environment snapshot's object name: one per setup identity. */
export function envSnapshotObjectName(workspaceId: string, environmentId: string, setupHash: string): string {
  return `${workspaceId}/${environmentId}/${setupHash}`;
}

/** Splits `<store>/<object name>`; the prefix picks the bucket. */
export function parseCheckpointRef(ref: string): { store: StoreName; name: string } {
  const slash = ref.indexOf("/");
  const store = slash > 0 ? ref.slice(0, slash) : "";
  const name = ref.slice(slash + 1);
  if (!storeNames.has(store) || slash < 0 || name.length === 0) throw new CheckpointError("checkpoint ref names no known store");
  return { store: store as StoreName, name };
}

export interface CheckpointStore {
  /** Streams a gzipped tar of workspace into the store under name. */
  save(store: StoreName, name: string, workspace: string): Promise<Checkpoint>;
  /** Streams the checkpoint's archive out of its store into workspace (which must exist). */
  restore(checkpoint: Checkpoint, workspace: string): Promise<void>;
}

/**
 * Checkpoints in the NATS object stores. Neither direction holds the archive
 * in memory: the tar is produced as the store reads it, and extracted as
 * chunks arrive.
 */
/**
 * Chunk size of a checkpoint object. Each chunk is one acknowledged publish
 * and the store sends them one at a time, so fewer, larger chunks mean fewer
 * round trips; half the default max_payload leaves room for any headers.
 */
const CHECKPOINT_CHUNK_BYTES = 512 * 1024;

export function createCheckpointStore(nc: NatsConnection): CheckpointStore {
  // The object store digests every chunk (put and get); its default is a
  // pure-JS SHA-256, several times slower than node:crypto on large objects.
  setSha256Backend("native");
  const objm = new Objm(nc);
  const opened = new Map<StoreName, Promise<ObjectStore>>();
  const open = (store: StoreName): Promise<ObjectStore> => {
    let os = opened.get(store);
    if (!os) {
      os = objm.open(store);
      // A failed open is retried next time rather than cached.
      os.catch(() => opened.delete(store));
      opened.set(store, os);
    }
    return os;
  };
  return {
    save: async (store, name, workspace) => {
      try {
        const os = await open(store);
        await os.put({ name, options: { max_chunk_size: CHECKPOINT_CHUNK_BYTES } }, packDirectory(workspace));
      } catch {
        throw new CheckpointError("checkpoint could not be stored");
      }
      return { ref: `${store}/${name}`, format: ARCHIVE_FORMAT, capabilities: ["portable"] };
    },
    restore: async (checkpoint, workspace) => {
      if (checkpoint.format !== ARCHIVE_FORMAT) throw new CheckpointError(`unsupported checkpoint format ${checkpoint.format.slice(0, 32)}`);
      const { store, name } = parseCheckpointRef(checkpoint.ref);
      let result;
      try {
        const os = await open(store);
        result = await os.get(name);
      } catch {
        throw new CheckpointError("checkpoint could not be read");
      }
      if (!result) throw new CheckpointError("checkpoint not found");
      try {
        await extractArchive(Readable.fromWeb(result.data as NodeWebReadableStream<Uint8Array>), workspace);
      } catch (err) {
        // A refused entry says why; a transfer error stays generic.
        throw err instanceof ArchiveRefusedError ? new CheckpointError(err.message) : new CheckpointError("checkpoint could not be restored");
      }
      // Set when the chunks did not match the stored digest.
      if (await result.error) throw new CheckpointError("checkpoint is corrupt");
    },
  };
}
