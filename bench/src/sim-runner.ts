import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  Buckets,
  DispatchCommand,
  runnerKey,
  RunnerLease,
  RegisterRunnerReply,
  RegisterRunnerRequest,
  RunnerFact,
  Streams,
  Subjects,
} from "@paddock/contracts";
import { decodeJson, encoderOf } from "@paddock/bus";

/**
 * A runner with an instant fake backend that still speaks the real protocol:
 * it registers, consumes its DISPATCH subject from its own durable, and answers
 * every `start` with a fenced `running` fact. Used to load the control plane
 * without paying for real processes.
 */
export async function startSimulatedRunner(
  nc: NatsConnection,
  runnerId: string,
  capacity: number,
  /** When each start arrived (session id → ms), for the bench's breakdown of where time goes. */
  startsAt?: Map<string, number>,
): Promise<{ stop(): Promise<void> }> {
  const poolId = "sim";
  const jsm = await jetstreamManager(nc);
  const durable = `runner-${poolId}-${runnerId}`;
  await jsm.consumers.add(Streams.dispatch, {
    durable_name: durable,
    filter_subject: Subjects.dispatch(poolId, runnerId),
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.New,
    // Memory-backed, as a runner-agent's (services/runner-agent/src/fleet/dispatch-consumer.ts).
    mem_storage: true,
  });
  // Checked as the bench's bus says (unchecked: deployed runners run so).
  const encode = encoderOf(nc);
  const req: RegisterRunnerRequest = { runnerId, poolId, generation: 1, capacityTotal: capacity, capabilities: [], sessions: [] };
  const reply = decodeJson(RegisterRunnerReply, (await nc.request(Subjects.register(req.poolId, req.runnerId), encode(RegisterRunnerRequest, req), { timeout: 10_000 })).data);
  if (!reply.ok || !reply.value.accepted) throw new Error(`simulated runner ${runnerId} was not accepted`);
  const generation = reply.value.generation;
  const js = jetstream(nc);
  // The lease, renewed as a runner-agent does (every 2 s, 10 s TTL): without it
  // the scheduler declares the runner lost 30 s after it started.
  const renew = () =>
    js.publish(`$KV.${Buckets.runnerLeases}.${runnerKey(poolId, runnerId)}`, encode(RunnerLease, { runnerId, poolId, generation, renewedAt: Date.now() }), { ttl: "10s" });
  await renew();
  const leaseTimer = setInterval(() => void renew().catch(() => undefined), 2_000);
  const messages = await (await js.consumers.get(Streams.dispatch, durable)).consume({ max_messages: 512 });
  const done = (async () => {
    for await (const m of messages) {
      const cmd = decodeJson(DispatchCommand, m.data);
      m.ack();
      if (!cmd.ok || cmd.value.type !== "start") continue;
      startsAt?.set(cmd.value.sessionId, Date.now());
      const fact: RunnerFact = {
        type: "running",
        runnerId,
        poolId,
        runnerGeneration: generation,
        sessionId: cmd.value.sessionId,
        workspaceId: cmd.value.workspaceId,
        placementGeneration: cmd.value.placementGeneration,
        at: Date.now(),
      };
      void js.publish(Subjects.runnerEvents(poolId, runnerId), encode(RunnerFact, fact)).catch(() => undefined);
    }
  })();
  return {
    stop: async () => {
      clearInterval(leaseTimer);
      await messages.close();
      await done;
    },
  };
}
