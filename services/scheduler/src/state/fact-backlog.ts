/**
 * How far the schedulers have got through the runners' reports. A creating
 * timeout judges a runner silent; that is only fair once every fact the
 * runner had published by the deadline has reached the record. After a
 * broker failover a committed `running` fact can sit unapplied for longer
 * than the timeout (its consumer's leader moved, the session bucket had no
 * leader), and the session it started would end `failed` although it ran
 * (found by `pnpm chaos`, broker).
 */
import type { JetStreamManager } from "@nats-io/jetstream";
import { Streams, Subjects } from "@paddock/contracts";

/** The durable consumer all scheduler replicas share on RUNNER: each fact is handled once. */
export const RUNNER_FACTS_CONSUMER = "scheduler";

export interface FactBacklog {
  /** Stream sequence of the runner's latest fact on RUNNER; 0 when it has none. */
  lastFactSeq(poolId: string, runnerId: string): Promise<number>;
  /** Every fact up to this stream sequence has been settled (applied, or dropped as stale). */
  settledThrough(): Promise<number>;
}

/** Reads from the stream and consumer leaders (management API), never from a lagging replica. */
export function createFactBacklog(jsm: JetStreamManager): FactBacklog {
  return {
    // null: the runner has published nothing (nats.js maps "no message found" to it).
    lastFactSeq: async (poolId, runnerId) => (await jsm.streams.getMessage(Streams.runner, { last_by_subj: Subjects.runnerEvents(poolId, runnerId) }))?.seq ?? 0,
    settledThrough: async () => (await jsm.consumers.info(Streams.runner, RUNNER_FACTS_CONSUMER)).ack_floor.stream_seq,
  };
}

/**
 * One sweep's reads, each done at most once per pass however many sessions
 * ask (a broker failover can leave hundreds of sessions past their deadline).
 */
export function perPass(backlog: FactBacklog): FactBacklog {
  const last = new Map<string, Promise<number>>();
  let settled: Promise<number> | undefined;
  return {
    lastFactSeq: (poolId, runnerId) => {
      const key = `${poolId}.${runnerId}`;
      let seq = last.get(key);
      if (!seq) last.set(key, (seq = backlog.lastFactSeq(poolId, runnerId)));
      return seq;
    },
    settledThrough: () => (settled ??= backlog.settledThrough()),
  };
}
