import { z } from "zod";
import { Id } from "@paddock/contracts";
import { commonEnv, envSchemas, parseEnv } from "@paddock/config";

const capabilities = z
  .string()
  .default("")
  .transform((s) =>
    s
      .split(",")
      .map((c) => c.trim())
      .filter((c) => c.length > 0),
  )
  .pipe(z.array(z.string().min(1).max(64)).max(64));

const RunnerEnv = z.object({
  ...commonEnv,
  PADDOCK_RUNNER_ID: Id,
  PADDOCK_POOL_ID: Id.default("default"),
  PADDOCK_RUNNER_CAPACITY: z.coerce.number().int().nonnegative().max(100_000).default(8),
  PADDOCK_RUNNER_DATA_DIR: z.string().min(1),
  PADDOCK_RUNNER_CAPABILITIES: capabilities,
  PADDOCK_RUNNER_LEASE_RENEW_MS: envSchemas.positiveMs.default(2_000),
  PADDOCK_RUNNER_KILL_GRACE_MS: envSchemas.positiveMs.default(5_000),
  /** How long one registration request waits for a scheduler before retrying. */
  PADDOCK_RUNNER_REGISTER_TIMEOUT_MS: envSchemas.positiveMs.default(2_000),
  /** Handed to session processes (their env is otherwise minimal). */
  PATH: z.string().default("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
});

export interface RunnerConfig {
  natsUrl: string;
  natsUser: string | undefined;
  natsPass: string | undefined;
  replicas: number;
  logLevel: string;
  opsPort: number;
  opsHost: string;
  runnerId: string;
  poolId: string;
  capacityTotal: number;
  dataDir: string;
  capabilities: string[];
  leaseRenewMs: number;
  killGraceMs: number;
  registerTimeoutMs: number;
  childPath: string;
}

/** The only reader of the environment; everything else takes a RunnerConfig. */
export function loadConfig(env: Record<string, string | undefined>): RunnerConfig {
  const e = parseEnv(RunnerEnv, env);
  return {
    natsUrl: e.PADDOCK_NATS_URL,
    natsUser: e.PADDOCK_NATS_USER,
    natsPass: e.PADDOCK_NATS_PASS,
    replicas: e.PADDOCK_REPLICAS,
    logLevel: e.PADDOCK_LOG_LEVEL,
    opsPort: e.PADDOCK_OPS_PORT,
    opsHost: e.PADDOCK_OPS_HOST,
    runnerId: e.PADDOCK_RUNNER_ID,
    poolId: e.PADDOCK_POOL_ID,
    capacityTotal: e.PADDOCK_RUNNER_CAPACITY,
    dataDir: e.PADDOCK_RUNNER_DATA_DIR,
    capabilities: e.PADDOCK_RUNNER_CAPABILITIES,
    leaseRenewMs: e.PADDOCK_RUNNER_LEASE_RENEW_MS,
    killGraceMs: e.PADDOCK_RUNNER_KILL_GRACE_MS,
    registerTimeoutMs: e.PADDOCK_RUNNER_REGISTER_TIMEOUT_MS,
    childPath: e.PATH,
  };
}
