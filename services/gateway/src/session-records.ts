import type { JetStreamManager } from "@nats-io/jetstream";
import { decodeJson, readLatestFromLeader } from "@paddock/bus";
import { Buckets, PaddockError, Session, sessionKey, UnavailableError } from "@paddock/contracts";

/** A session's record as the scheduler last stored it; undefined when there is none (or it was deleted). */
export type SessionRecordReader = (workspaceId: string, sessionId: string) => Promise<Session | undefined>;

/**
 * Reads session records from the sessions bucket's stream leader, as the
 * scheduler's own reads do (decision 0071): a record the scheduler answered a
 * write with is the one read here, which a direct get — answered by any
 * replica — does not promise. The gateway reads; only the scheduler writes.
 */
export function sessionRecordReader(jsm: () => Promise<JetStreamManager>): SessionRecordReader {
  return async (workspaceId, sessionId) => {
    const entry = await jsm()
      .then((m) => readLatestFromLeader(m, Buckets.sessions, sessionKey(workspaceId, sessionId)))
      .catch((err: unknown) => {
        throw err instanceof PaddockError ? err : new UnavailableError("the session store did not answer", { cause: err });
      });
    if (!entry) return undefined;
    const decoded = decodeJson(Session, entry.value);
    if (!decoded.ok) throw new UnavailableError(`the stored record of session ${sessionId} is unreadable`);
    return decoded.value;
  };
}
