import { AckPolicy, DeliverPolicy, JetStreamApiCodes, JetStreamApiError, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  RegisterRunnerReply,
  RegisterRunnerRequest,
  Streams,
  Subjects,
  runnerNatsUser,
  type RunnerResources,
} from "@paddock/contracts";
import { decodeJson, encodeJson } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { z } from "zod";
import { RegistrationRefusedError, StoppedError } from "./errors.ts";
import type { HeldSession } from "./types.ts";

/** The runner's DISPATCH durable: named like its NATS user, whose permissions name it. */
export function dispatchConsumerName(poolId: string, runnerId: string): string {
  return runnerNatsUser(poolId, runnerId);
}

/**
 * Creates this runner's durable DISPATCH consumer unless it exists. It must
 * exist before registering: the scheduler may dispatch as soon as it accepts,
 * and "deliver new" only covers messages published after creation. An
 * existing consumer is left alone so it continues from its ack floor.
 */
export async function ensureDispatchConsumer(jsm: JetStreamManager, poolId: string, runnerId: string): Promise<string> {
  const name = dispatchConsumerName(poolId, runnerId);
  try {
    await jsm.consumers.info(Streams.dispatch, name);
    return name;
  } catch (err) {
    if (!(err instanceof JetStreamApiError) || err.code !== JetStreamApiCodes.ConsumerNotFound) throw err;
  }
  await jsm.consumers.add(Streams.dispatch, {
    durable_name: name,
    filter_subject: Subjects.dispatch(poolId, runnerId),
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.New,
  });
  return name;
}

export interface RegisterOptions {
  nc: NatsConnection;
  log: Logger;
  runnerId: string;
  poolId: string;
  capacityTotal: number;
  capabilities: string[];
  resources?: RunnerResources | undefined;
  sessions: HeldSession[];
  /** The generation last granted (persisted); the first claim is one more. */
  persisted: number;
  timeoutMs: number;
  isStopped: () => boolean;
  sleep: (ms: number) => Promise<void>;
}

type Reply = z.infer<typeof RegisterRunnerReply>;

/**
 * Registers, claiming persisted+1. A refusal means the stored generation is
 * ahead of our file (we crashed after a grant, before persisting it), so we
 * claim one past it, once; a second refusal means another process holds this
 * runner id, and we must not fight it. No answer (no scheduler yet) is retried
 * with backoff so a runner may start before any scheduler.
 */
export async function register(opts: RegisterOptions): Promise<Reply> {
  let claim = opts.persisted + 1;
  let reclaimed = false;
  for (let attempt = 0; ; attempt++) {
    if (opts.isStopped()) throw new StoppedError();
    const reply = await requestOnce(opts, claim);
    if (!reply.ok) {
      if (attempt % 10 === 0) opts.log.warn({ reason: reply.reason, claim }, "registration got no answer; retrying");
      await opts.sleep(Math.min(100 * 2 ** Math.min(attempt, 5), 2_000));
      continue;
    }
    if (reply.value.accepted) return reply.value;
    if (reclaimed) {
      throw new RegistrationRefusedError(`generation ${claim} refused; stored generation is ${reply.value.generation}`);
    }
    opts.log.info({ claim, stored: reply.value.generation }, "registration refused; claiming past the stored generation");
    reclaimed = true;
    claim = reply.value.generation + 1;
  }
}

async function requestOnce(opts: RegisterOptions, generation: number): Promise<{ ok: true; value: Reply } | { ok: false; reason: string }> {
  const body = encodeJson(RegisterRunnerRequest, {
    runnerId: opts.runnerId,
    poolId: opts.poolId,
    generation,
    capacityTotal: opts.capacityTotal,
    capabilities: opts.capabilities,
    ...(opts.resources ? { resources: opts.resources } : {}),
    sessions: opts.sessions,
  });
  try {
    const msg = await opts.nc.request(Subjects.register, body, { timeout: opts.timeoutMs });
    const decoded = decodeJson(RegisterRunnerReply, msg.data);
    return decoded.ok ? decoded : { ok: false, reason: `malformed reply: ${decoded.reason}` };
  } catch (err) {
    return { ok: false, reason: err instanceof Error ? err.message : String(err) };
  }
}
