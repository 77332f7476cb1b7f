import { createCipheriv, createHash, randomBytes } from "node:crypto";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { chunkStreamConfig, isStreamNotFound } from "@paddock/bus";
import { chunkStreamOwner, runnerChunkStream, Subjects, type ManifestChunk } from "@paddock/contracts";
import { CheckpointError } from "../errors.ts";
import { fetchChunk, IV_BYTES, TAG_BYTES, type ChunkAddress } from "./chunk-fetch.ts";

// Defined once in @paddock/contracts (the restore script parses chunk stream names too); kept exported from here.
export { chunkStreamOwner };

/**
 * Checkpoint chunks in runners' chunk streams (docs/decisions/0062). A chunk
 * is sealed with a key of its own (AES-256-GCM, random IV in front, tag at
 * the end); the key lives only in the sealed manifests that name the chunk,
 * so the stream, which every runner reads, shows nothing. Its id is the
 * sha256 of its IV and GCM tag: the subject names one content.
 */
export interface ChunkStore {
  /** Seals and stores plain bytes in this runner's own stream; resolves once the stream acknowledged them. */
  put(plain: Buffer, sha256: string): Promise<ManifestChunk>;
  /** A chunk's plain bytes, from whichever runner's stream holds it; fails when gone or when it does not open with its key. */
  fetch(chunk: ChunkAddress): Promise<Buffer>;
}

/** Where a manifest's chunk is: its stream and subject, named by the runner that stored it. */
export function addressOf(chunk: ManifestChunk): ChunkAddress {
  const holder = chunkStreamOwner(chunk.stream);
  if (!holder) throw new CheckpointError("checkpoint chunk names no runner's stream");
  return { stream: chunk.stream, subject: Subjects.chunk(holder.poolId, holder.runnerId, chunk.id), key: chunk.key, bytes: chunk.bytes };
}

export function sha256Url(bytes: Buffer): string {
  return createHash("sha256").update(bytes).digest("base64url");
}

export function createChunkStore(nc: NatsConnection, owner: { poolId: string; runnerId: string }): ChunkStore {
  const stream = runnerChunkStream(owner.poolId, owner.runnerId);
  let js: JetStreamClient | undefined;
  let jsm: Promise<JetStreamManager> | undefined;
  const manager = (): Promise<JetStreamManager> => {
    jsm ??= jetstreamManager(nc);
    jsm.catch(() => (jsm = undefined));
    return jsm;
  };
  // Provisioned at start (provision.ts); made here where missing (tests may skip provisioning), once per process.
  let ensured: Promise<void> | undefined;
  const ensure = (): Promise<void> => {
    ensured ??= (async () => {
      const m = await manager();
      await m.streams.info(stream).catch(async (err: unknown) => {
        if (!isStreamNotFound(err)) throw err;
        await m.streams.add(chunkStreamConfig(owner.poolId, owner.runnerId, 1));
      });
    })();
    ensured.catch(() => (ensured = undefined));
    return ensured;
  };
  return {
    put: async (plain, sha256) => {
      const key = randomBytes(32);
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv("aes-256-gcm", key, iv);
      const sealedBytes = Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
      // Named by its IV and tag (the tag authenticates the sealed bytes under the chunk's key): as unique as a hash of
      // all of them, for none of the cost of hashing a mebibyte again.
      const id = sha256Url(Buffer.concat([iv, sealedBytes.subarray(sealedBytes.length - TAG_BYTES)]));
      js ??= jetstream(nc);
      try {
        await ensure();
        await js.publish(Subjects.chunk(owner.poolId, owner.runnerId, id), sealedBytes);
      } catch (err) {
        throw new CheckpointError("checkpoint chunk could not be stored", { cause: err });
      }
      return { stream, id, key: key.toString("base64"), sha256, bytes: plain.length };
    },
    fetch: async (chunk) => {
      const m = await manager().catch((err: unknown) => Promise.reject(new CheckpointError("checkpoint chunk could not be read", { cause: err })));
      return fetchChunk(m, chunk);
    },
  };
}
