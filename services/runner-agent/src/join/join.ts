import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { createUser, fromSeed } from "@nats-io/nkeys";
import { ErrorBody, JoinedRunner, PublicApi, runnerNatsUser, type JoinRunnerBody } from "@paddock/contracts";

/** The join was refused or could not be made: the gateway's error code when it answered one. */
export class JoinError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = "JoinError";
  }
}

export interface JoinOptions {
  /** The gateway's base URL (https in production). */
  gatewayUrl: string;
  /** The one-time join token (`pdj_...`); sent once in the body, never logged or written. */
  token: string;
  /** The runner's id; the gateway generates one when absent. */
  runnerId?: string | undefined;
  /** The env file the runner-agent is started with (systemd EnvironmentFile); settings already in it are kept. */
  configFile: string;
  /** Where the nkey seed is kept (0600); default beside the config: `<config>.seed`. */
  seedFile?: string | undefined;
}

/** The settings the join writes into the config file (others in it are kept as they are). */
const WRITTEN = ["PADDOCK_RUNNER_ID", "PADDOCK_POOL_ID", "PADDOCK_NATS_URL", "PADDOCK_NATS_USER", "PADDOCK_NATS_NKEY_SEED_FILE", "PADDOCK_GATEWAY_URL"] as const;

/**
 * Joins this host to the fleet: makes (or reuses, after a failed attempt) the
 * runner's nkey, whose seed never leaves the host (0600, beside the config),
 * spends the join token for the public half, and writes the config the
 * runner-agent starts with. The seed is written before the join, so a
 * registered key is never lost to a crash in between.
 */
export async function joinFleet(opts: JoinOptions, fetchImpl: typeof fetch = fetch): Promise<JoinedRunner & { seedFile: string }> {
  const seedFile = opts.seedFile ?? `${opts.configFile}.seed`;
  const publicKey = ensureSeed(seedFile);
  const body: JoinRunnerBody = { joinToken: opts.token, publicKey, ...(opts.runnerId !== undefined ? { runnerId: opts.runnerId } : {}) };
  let res: Response;
  try {
    res = await fetchImpl(new URL(PublicApi.joinRunner.path, opts.gatewayUrl), { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  } catch (err) {
    throw new JoinError("unavailable", `cannot reach the gateway at ${opts.gatewayUrl}`, { cause: err });
  }
  const answer: unknown = await res.json().catch(() => undefined);
  if (!res.ok) {
    const e = ErrorBody.safeParse((answer as { error?: unknown } | undefined)?.error);
    throw new JoinError(e.success ? e.data.code : "internal", e.success ? e.data.message : `the gateway answered ${String(res.status)}`);
  }
  const joined = JoinedRunner.safeParse(answer);
  if (!joined.success) throw new JoinError("internal", "the gateway's answer is not a joined runner");
  writeConfig(opts.configFile, {
    PADDOCK_RUNNER_ID: joined.data.runnerId,
    PADDOCK_POOL_ID: joined.data.poolId,
    PADDOCK_NATS_URL: joined.data.natsUrls.join(","),
    // Not a password: the name the auth callout gives this runner, which its inbox prefix must match.
    PADDOCK_NATS_USER: runnerNatsUser(joined.data.poolId, joined.data.runnerId),
    PADDOCK_NATS_NKEY_SEED_FILE: seedFile,
    PADDOCK_GATEWAY_URL: opts.gatewayUrl,
  });
  return { ...joined.data, seedFile };
}

/** The public key of the seed in `file`, made first (0600, never overwritten) when there is none. */
function ensureSeed(file: string): string {
  if (!existsSync(file)) {
    const kp = createUser();
    writeFileSync(file, `${new TextDecoder().decode(kp.getSeed())}\n`, { mode: 0o600, flag: "wx" });
  }
  chmodSync(file, 0o600);
  try {
    return fromSeed(new TextEncoder().encode(readFileSync(file, "utf8").trim())).getPublicKey();
  } catch (err) {
    throw new JoinError("invalid", `${file} does not hold an nkey seed`, { cause: err });
  }
}

/** Rewrites the env file with the join's settings, keeping every other line. */
function writeConfig(file: string, values: Record<(typeof WRITTEN)[number], string>): void {
  const kept = existsSync(file)
    ? readFileSync(file, "utf8")
        .split("\n")
        .filter((line) => !WRITTEN.some((k) => line.startsWith(`${k}=`)) && line.trim() !== "")
    : [];
  const written = Object.entries(values).map(([k, v]) => `${k}=${v}`);
  writeFileSync(file, [...kept, "# Written by paddock-runner join; the nkey seed is in PADDOCK_NATS_NKEY_SEED_FILE, never here.", ...written, ""].join("\n"), { mode: 0o600 });
}
