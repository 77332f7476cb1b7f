import { AckPolicy, DeliverPolicy, JetStreamApiCodes, JetStreamApiError, type ConsumerConfig, type JetStreamManager } from "@nats-io/jetstream";
import { Streams, Subjects, runnerNatsUser } from "@paddock/contracts";
import type { ConsumerRecovery } from "@paddock/bus";

/** The runner's DISPATCH durable: named like its NATS user, whose permissions name it. */
export function dispatchConsumerName(poolId: string, runnerId: string): string {
  return runnerNatsUser(poolId, runnerId);
}

/**
 * The consumer's settings. On a single server its state is kept in memory
 * (`mem_storage`): with a file-backed one the server rewrote a state file (a
 * new file and a rename) up to ten times a second per runner while commands
 * flowed, which was half of nats-server's CPU with 500 runners (`pnpm bench`,
 * benchmark 1). What that costs is the consumer itself on a broker restart;
 * the runner makes it again from what it settled (`recovery` below). On a
 * cluster (replicas > 1) the state stays on file: in `pnpm chaos`, broker,
 * sessions created around the node kills ended at a median of 0.22-0.25 s
 * with file-backed R3 consumers and 0.94 s with memory-backed ones, in runs
 * with as many acknowledged creates (224-250; the median grows with that
 * backlog, 2026-12-04).
 */
function dispatchConsumerConfig(poolId: string, runnerId: string, memory: boolean, start: { afterSeq: number } | "new"): Partial<ConsumerConfig> {
  return {
    durable_name: dispatchConsumerName(poolId, runnerId),
    filter_subject: Subjects.dispatch(poolId, runnerId),
    ack_policy: AckPolicy.Explicit,
    mem_storage: memory,
    ...(start === "new" ? { deliver_policy: DeliverPolicy.New } : { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: start.afterSeq + 1 }),
  };
}

/**
 * Creates this runner's durable DISPATCH consumer unless it exists, and says
 * how to make it again if the server loses it. It must exist before
 * registering: the scheduler may dispatch as soon as it accepts, and "deliver
 * new" only covers messages published after creation. An existing consumer is
 * left alone so it continues from its ack floor.
 */
export async function ensureDispatchConsumer(
  jsm: JetStreamManager,
  poolId: string,
  runnerId: string,
  /** Stream replicas of this deployment (`PADDOCK_REPLICAS`): memory-backed state on a single server only. */
  replicas: number,
): Promise<{ name: string; recovery: ConsumerRecovery }> {
  const name = dispatchConsumerName(poolId, runnerId);
  const memory = replicas === 1;
  const recovery = (floor: number): ConsumerRecovery => ({
    floor,
    create: async (settledThrough) => {
      try {
        await jsm.consumers.add(Streams.dispatch, dispatchConsumerConfig(poolId, runnerId, memory, { afterSeq: settledThrough }));
      } catch (err) {
        // Made again meanwhile (another attempt): it delivers from where that one said.
        const exists = await jsm.consumers.info(Streams.dispatch, name).then(() => true, () => false);
        if (!exists) throw err;
      }
    },
  });
  try {
    const info = await jsm.consumers.info(Streams.dispatch, name);
    return { name, recovery: recovery(info.ack_floor.stream_seq) };
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.ConsumerNotFound)) throw err;
  }
  const created = await jsm.consumers.add(Streams.dispatch, dispatchConsumerConfig(poolId, runnerId, memory, "new"));
  // Delivering new: everything up to the stream's last sequence at creation counts as settled.
  return { name, recovery: recovery(created.delivered.stream_seq) };
}
