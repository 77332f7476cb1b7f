import type { JetStreamManager } from "@nats-io/jetstream";

/** The latest stored value of a KV key with its revision (the stream sequence a compare-and-set names). */
export interface LatestEntry {
  value: Uint8Array;
  revision: number;
}

/**
 * Reads a KV key's latest revision from its stream's leader (`STREAM.MSG.GET`,
 * last message on the key's subject); undefined when the key has no value or
 * was deleted.
 *
 * `kv.get` uses direct get, which on a replicated bucket any replica may
 * answer, a follower possibly behind the leader (NATS promises monotonic
 * reads, not read-your-writes). Decisions that fence — is this runner still
 * at this generation, is this still the session's placement — take the
 * leader's answer instead, at one JetStream API request (~70 µs more than a
 * direct get on this machine).
 */
export async function readLatestFromLeader(jsm: JetStreamManager, bucket: string, key: string): Promise<LatestEntry | undefined> {
  const msg = await jsm.streams.getMessage(`KV_${bucket}`, { last_by_subj: `$KV.${bucket}.${key}` });
  if (!msg) return undefined;
  const op = msg.header.get("KV-Operation");
  if (op === "DEL" || op === "PURGE") return undefined;
  return { value: msg.data, revision: msg.seq };
}
