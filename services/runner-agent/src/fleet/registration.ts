import type { NatsConnection } from "@nats-io/transport-node";
import {
  RegisterRunnerReply,
  RegisterRunnerRequest,
  Subjects,
  type RunnerResources,
} from "@paddock/contracts";
import { decodeJson, encoderOf } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { z } from "zod";
import { RegistrationRefusedError, StoppedError } from "../errors.ts";
import type { HeldSession } from "@paddock/contracts";

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
  const body = encoderOf(opts.nc)(RegisterRunnerRequest, {
    runnerId: opts.runnerId,
    poolId: opts.poolId,
    generation,
    capacityTotal: opts.capacityTotal,
    capabilities: opts.capabilities,
    ...(opts.resources ? { resources: opts.resources } : {}),
    sessions: opts.sessions,
  });
  try {
    const msg = await opts.nc.request(Subjects.register(opts.poolId, opts.runnerId), body, { timeout: opts.timeoutMs });
    const decoded = decodeJson(RegisterRunnerReply, msg.data);
    return decoded.ok ? decoded : { ok: false, reason: `malformed reply: ${decoded.reason}` };
  } catch (err) {
    return { ok: false, reason: err instanceof Error ? err.message : String(err) };
  }
}
