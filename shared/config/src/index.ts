import { z } from "zod";

export class ConfigError extends Error {
  readonly code = "invalid_config";
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/** Parses an environment with a zod schema; the only way services read configuration. */
export function parseEnv<S extends z.ZodType>(schema: S, env: Record<string, string | undefined>): z.infer<S> {
  const parsed = schema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
    throw new ConfigError(`invalid configuration: ${lines.join("; ")}`);
  }
  return parsed.data;
}

const port = z.coerce.number().int().min(0).max(65535);
const positiveMs = z.coerce.number().int().positive();

/** Settings every service shares: where NATS is, how to log, where to serve ops endpoints. */
export const commonEnv = {
  PADDOCK_NATS_URL: z.string().default("nats://127.0.0.1:4222"),
  PADDOCK_NATS_USER: z.string().optional(),
  PADDOCK_NATS_PASS: z.string().optional(),
  /** Replica count for streams and buckets: 1 on one machine, 3 on a cluster. */
  PADDOCK_REPLICAS: z.coerce.number().int().min(1).max(5).default(1),
  PADDOCK_LOG_LEVEL: z.enum(["trace", "debug", "info", "warn", "error", "fatal", "silent"]).default("info"),
  /** Port of /healthz, /readyz and /metrics; 0 picks a free one (logged at start). */
  PADDOCK_OPS_PORT: port.default(0),
  PADDOCK_OPS_HOST: z.string().default("127.0.0.1"),
  /** An event-loop delay past this within a 5 s window logs a warning (`paddock_event_loop_lag_*` on /metrics). */
  PADDOCK_EVENT_LOOP_LAG_WARN_MS: positiveMs.default(500),
  /** Check every outgoing bus message against its schema too (receivers always check): a debugging aid, on in the test stacks. */
  PADDOCK_VALIDATE_OUTGOING: z.enum(["true", "false"]).default("false"),
};

export const envSchemas = { port, positiveMs };

/** The shared settings, named as services use them. */
export function commonConfig(e: {
  PADDOCK_NATS_URL: string;
  PADDOCK_NATS_USER?: string | undefined;
  PADDOCK_NATS_PASS?: string | undefined;
  PADDOCK_REPLICAS: number;
  PADDOCK_LOG_LEVEL: "trace" | "debug" | "info" | "warn" | "error" | "fatal" | "silent";
  PADDOCK_OPS_HOST: string;
  PADDOCK_OPS_PORT: number;
  PADDOCK_EVENT_LOOP_LAG_WARN_MS: number;
  PADDOCK_VALIDATE_OUTGOING: "true" | "false";
}) {
  return {
    natsUrl: e.PADDOCK_NATS_URL,
    natsUser: e.PADDOCK_NATS_USER,
    natsPass: e.PADDOCK_NATS_PASS,
    replicas: e.PADDOCK_REPLICAS,
    logLevel: e.PADDOCK_LOG_LEVEL,
    opsHost: e.PADDOCK_OPS_HOST,
    opsPort: e.PADDOCK_OPS_PORT,
    eventLoopLagWarnMs: e.PADDOCK_EVENT_LOOP_LAG_WARN_MS,
    validateOutgoing: e.PADDOCK_VALIDATE_OUTGOING === "true",
  };
}
