import { z } from "zod";
import { commonConfig, commonEnv, parseEnv } from "@paddock/config";

const RecorderEnv = z.object({
  ...commonEnv,
  /** How long audit events are kept in AUDIT. */
  PADDOCK_AUDIT_MAX_AGE_MS: z.coerce.number().int().positive().default(30 * 24 * 60 * 60 * 1000),
});

export type RecorderConfig = ReturnType<typeof loadConfig>;

export function loadConfig(env: Record<string, string | undefined>) {
  const e = parseEnv(RecorderEnv, env);
  return {
    ...commonConfig(e),
    auditMaxAgeMs: e.PADDOCK_AUDIT_MAX_AGE_MS,
  };
}
