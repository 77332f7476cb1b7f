import { z } from "zod";
import { SecretsKeySetting } from "@paddock/bus";
import { commonConfig, commonEnv, envSchemas, parseEnv } from "@paddock/config";
import { WEBHOOK_RETRY_SCHEDULE_MS } from "@paddock/contracts";

const RecorderEnv = z.object({
  ...commonEnv,
  /** How long audit events are kept in AUDIT. */
  PADDOCK_AUDIT_MAX_AGE_MS: z.coerce.number().int().positive().default(30 * 24 * 60 * 60 * 1000),
  /** Opens webhooks' signing secrets (the gateway seals them with the same key). */
  PADDOCK_SECRETS_KEY: SecretsKeySetting,
  /** `1`: deliver to private, loopback and link-local addresses too (the gateway's setting of the same name decides registration). */
  PADDOCK_WEBHOOK_ALLOW_PRIVATE: envSchemas.flag.default(false),
  /** The waits before each retry of a failed delivery, comma-separated ms (default: the Standard Webhooks schedule, ~27.6 h). */
  PADDOCK_WEBHOOK_RETRY_SCHEDULE_MS: envSchemas.msList.default([...WEBHOOK_RETRY_SCHEDULE_MS]),
});

export type RecorderConfig = ReturnType<typeof loadConfig>;

export function loadConfig(env: Record<string, string | undefined>) {
  const e = parseEnv(RecorderEnv, env);
  return {
    ...commonConfig(e),
    auditMaxAgeMs: e.PADDOCK_AUDIT_MAX_AGE_MS,
    webhooks: { secretsKey: e.PADDOCK_SECRETS_KEY, allowPrivate: e.PADDOCK_WEBHOOK_ALLOW_PRIVATE, retryScheduleMs: e.PADDOCK_WEBHOOK_RETRY_SCHEDULE_MS },
  };
}
