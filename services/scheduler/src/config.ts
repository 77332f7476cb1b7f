import { z } from "zod";
import { commonEnv, parseEnv } from "@paddock/config";

const ms = z.coerce.number().int().positive();

const SchedulerEnv = z.object({
  ...commonEnv,
  /** How often queued sessions are retried for placement and sweeps run. */
  PADDOCK_SCHEDULER_TICK_MS: ms.default(1_000),
  /** A creating session whose start was not acknowledged is re-dispatched after this. */
  PADDOCK_REDISPATCH_AFTER_MS: ms.default(5_000),
  /** Pool a session is placed in when nothing selects another. */
  PADDOCK_DEFAULT_POOL: z.string().default("default"),
});

export type SchedulerConfig = ReturnType<typeof loadConfig>;

export function loadConfig(env: Record<string, string | undefined>) {
  const e = parseEnv(SchedulerEnv, env);
  return {
    natsUrl: e.PADDOCK_NATS_URL,
    natsUser: e.PADDOCK_NATS_USER,
    natsPass: e.PADDOCK_NATS_PASS,
    replicas: e.PADDOCK_REPLICAS,
    logLevel: e.PADDOCK_LOG_LEVEL,
    opsHost: e.PADDOCK_OPS_HOST,
    opsPort: e.PADDOCK_OPS_PORT,
    tickMs: e.PADDOCK_SCHEDULER_TICK_MS,
    redispatchAfterMs: e.PADDOCK_REDISPATCH_AFTER_MS,
    defaultPool: e.PADDOCK_DEFAULT_POOL,
  };
}
