import { readFileSync, statSync } from "node:fs";
import { z } from "zod";

export class ConfigError extends Error {
  readonly code = "invalid_config";
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/**
 * Secret settings that may also come from a file: `<NAME>_FILE` names a file
 * (not readable by group or others) whose contents, trimmed, are the value, so
 * the secret stays out of the environment (`npm run up` passes them so).
 */
export const FILE_SECRET_SETTINGS = [
  "PADDOCK_SECRETS_KEY",
  "PADDOCK_SESSION_TOKEN_SECRET",
  "PADDOCK_DEV_TOKEN",
  "PADDOCK_OIDC_CLIENT_SECRET",
  "PADDOCK_NATS_NKEY_SEED",
  "PADDOCK_AUTH_CALLOUT_ISSUER_SEED",
  "PADDOCK_NATS_SYSTEM_SEED",
] as const;

function withFileSecrets(env: Record<string, string | undefined>): Record<string, string | undefined> {
  const out = { ...env };
  for (const name of FILE_SECRET_SETTINGS) {
    const file = env[`${name}_FILE`];
    if (file === undefined) continue;
    if (env[name] !== undefined) throw new ConfigError(`invalid configuration: ${name}_FILE: set either it or ${name}, not both`);
    out[name] = readPrivateFile(`${name}_FILE`, file).trim();
  }
  return out;
}

/** Parses an environment with a zod schema; the only way services read configuration. */
export function parseEnv<S extends z.ZodType>(schema: S, env: Record<string, string | undefined>): z.infer<S> {
  const parsed = schema.safeParse(withFileSecrets(env));
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
  /**
   * A file holding this service's NATS credentials (`NatsCredentialsFile`,
   * written by `npm run up`): the password stays out of the environment. It must
   * not be readable by group or others; excludes PADDOCK_NATS_USER/PASS.
   */
  PADDOCK_NATS_CREDS_FILE: z.string().min(1).optional(),
  /**
   * An nkey seed (`SU...`; best as PADDOCK_NATS_NKEY_SEED_FILE, 0600): sign the
   * server's nonce instead of a password. A joined runner's own key, admitted
   * by the gateway's auth callout (deploy/runner/README.md); PADDOCK_NATS_USER
   * then only names its inbox prefix. Excludes PADDOCK_NATS_PASS and a creds file.
   */
  PADDOCK_NATS_NKEY_SEED: z.string().regex(/^SU[A-Z2-7]{56}$/, "a user nkey seed (SU..., 58 characters)").optional(),
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

/** An on/off setting: `1`/`true` or `0`/`false`. */
const flag = z.enum(["1", "0", "true", "false"]).transform((v) => v === "1" || v === "true");
/** Durations in ms, comma-separated (a schedule), at least one. */
const msList = z
  .string()
  .regex(/^\d+(,\d+)*$/, "must be comma-separated milliseconds")
  .transform((v) => v.split(",").map(Number));

export const envSchemas = { port, positiveMs, flag, msList };

/** What a NATS credentials file holds (JSON). */
export const NatsCredentialsFile = z.object({ user: z.string().min(1).max(256), password: z.string().min(1).max(1024) }).strict();
export type NatsCredentialsFile = z.infer<typeof NatsCredentialsFile>;

/**
 * Reads a file holding a secret, once, at config time. Refuses a file group or
 * others may read (like ssh does with keys): it is the only thing keeping other
 * local users out. Messages never quote the contents.
 */
function readPrivateFile(setting: string, file: string): string {
  let text: string;
  let mode: number;
  try {
    mode = statSync(file).mode;
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new ConfigError(`invalid configuration: ${setting}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? "error"})`);
  }
  if ((mode & 0o077) !== 0) {
    throw new ConfigError(`invalid configuration: ${setting}: ${file} is readable by others (mode ${(mode & 0o777).toString(8)}); chmod 600 it`);
  }
  return text;
}

/** Reads a NATS credentials file (`PADDOCK_NATS_CREDS_FILE`), refused when group or others may read it. */
export function readNatsCredentials(file: string): NatsCredentialsFile {
  const text = readPrivateFile("PADDOCK_NATS_CREDS_FILE", file);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  const parsed = NatsCredentialsFile.safeParse(json);
  if (!parsed.success) throw new ConfigError(`invalid configuration: PADDOCK_NATS_CREDS_FILE: ${file} is not {"user","password"} JSON`);
  return parsed.data;
}

/** The shared settings as parsed (any service's env schema extends commonEnv). */
type CommonEnv = z.infer<z.ZodObject<typeof commonEnv>>;

interface NatsCredentials {
  natsUser: string | undefined;
  natsPass: string | undefined;
  natsNkeySeed: string | undefined;
}

function natsCredentials(e: Pick<CommonEnv, "PADDOCK_NATS_USER" | "PADDOCK_NATS_PASS" | "PADDOCK_NATS_CREDS_FILE" | "PADDOCK_NATS_NKEY_SEED">): NatsCredentials {
  if (e.PADDOCK_NATS_NKEY_SEED !== undefined) {
    if (e.PADDOCK_NATS_PASS !== undefined || e.PADDOCK_NATS_CREDS_FILE !== undefined) {
      throw new ConfigError("invalid configuration: PADDOCK_NATS_NKEY_SEED: set either it or a password (PADDOCK_NATS_PASS, PADDOCK_NATS_CREDS_FILE), not both");
    }
    return { natsUser: e.PADDOCK_NATS_USER, natsPass: undefined, natsNkeySeed: e.PADDOCK_NATS_NKEY_SEED };
  }
  if (e.PADDOCK_NATS_CREDS_FILE === undefined) return { natsUser: e.PADDOCK_NATS_USER, natsPass: e.PADDOCK_NATS_PASS, natsNkeySeed: undefined };
  if (e.PADDOCK_NATS_USER !== undefined || e.PADDOCK_NATS_PASS !== undefined) {
    throw new ConfigError("invalid configuration: PADDOCK_NATS_CREDS_FILE: set either it or PADDOCK_NATS_USER/PASS, not both");
  }
  const creds = readNatsCredentials(e.PADDOCK_NATS_CREDS_FILE);
  return { natsUser: creds.user, natsPass: creds.password, natsNkeySeed: undefined };
}

/** The shared settings, named as services use them. */
export function commonConfig(e: CommonEnv) {
  return {
    natsUrl: e.PADDOCK_NATS_URL,
    ...natsCredentials(e),
    replicas: e.PADDOCK_REPLICAS,
    logLevel: e.PADDOCK_LOG_LEVEL,
    opsHost: e.PADDOCK_OPS_HOST,
    opsPort: e.PADDOCK_OPS_PORT,
    eventLoopLagWarnMs: e.PADDOCK_EVENT_LOOP_LAG_WARN_MS,
    validateOutgoing: e.PADDOCK_VALIDATE_OUTGOING === "true",
  };
}
