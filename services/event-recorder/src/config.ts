import { z } from "zod";
import { commonEnv, parseEnv } from "@paddock/config";

const RecorderEnv = z.object({
  ...commonEnv,
  /** How long audit events are kept in AUDIT. */
  PADDOCK_AUDIT_MAX_AGE_MS: z.coerce.number().int().positive().default(30 * 24 * 60 * 60 * 1000),
});

export type RecorderConfig = ReturnType<typeof loadConfig>;

export function loadConfig(env: Record<string, string | undefined>) {
  const e = parseEnv(RecorderEnv, env);
  return {
    natsUrl: e.PADDOCK_NATS_URL,
    natsUser: e.PADDOCK_NATS_USER,
    natsPass: e.PADDOCK_NATS_PASS,
    replicas: e.PADDOCK_REPLICAS,
    logLevel: e.PADDOCK_LOG_LEVEL,
    opsHost: e.PADDOCK_OPS_HOST,
    opsPort: e.PADDOCK_OPS_PORT,
    auditMaxAgeMs: e.PADDOCK_AUDIT_MAX_AGE_MS,
  };
}
