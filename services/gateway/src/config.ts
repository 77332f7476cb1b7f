import { resolve } from "node:path";
import { z } from "zod";
import { commonConfig, commonEnv, ConfigError, envSchemas, parseEnv } from "@paddock/config";
import { SecretsKeySetting } from "@paddock/bus";
import { Id, MAX_INLINE_FILE_BYTES, MAX_TOKEN_LIFETIME_MS } from "@paddock/contracts";

const bytes = z.coerce.number().int().positive();

/** The repository's console build (`npm run build:console`), found from this file so any working directory works. */
const DEFAULT_CONSOLE_DIR = resolve(import.meta.dirname, "../../../console/dist");

/** The gateway's environment; the only place it reads configuration. */
export const GatewayEnv = z.object({
  ...commonEnv,
  PADDOCK_HTTP_HOST: z.string().default("127.0.0.1"),
  /** Port of the public API; 0 picks a free one (logged as httpPort at start). */
  PADDOCK_HTTP_PORT: envSchemas.port.default(8080),
  /** When set, seeded at start as an admin token of PADDOCK_DEV_WORKSPACE. */
  PADDOCK_DEV_TOKEN: z.string().min(1).optional(),
  PADDOCK_DEV_WORKSPACE: Id.default("default"),
  PADDOCK_DEV_ACTOR: Id.default("dev"),
  PADDOCK_MAX_BODY_BYTES: bytes.default(1024 * 1024),
  PADDOCK_WS_MAX_PAYLOAD_BYTES: bytes.default(64 * 1024),
  /** A terminal client whose unsent output exceeds this is closed (4008) and may resume. */
  PADDOCK_WS_SEND_BUFFER_BYTES: bytes.default(8 * 1024 * 1024),
  /** Timeout of each gateway → scheduler request. */
  PADDOCK_RPC_TIMEOUT_MS: envSchemas.positiveMs.default(5_000),
  /** Largest gzipped tar a workspace PUT may send; more is 413 too_large (reading stops). */
  PADDOCK_MAX_UPLOAD_BYTES: bytes.default(1024 * 1024 * 1024),
  /** Files up to this size cross the bus inline (one message each way) rather than through a transfer object; bounded by the server's max_payload too; 0: never. */
  PADDOCK_FILES_INLINE_MAX_BYTES: z.coerce.number().int().nonnegative().max(MAX_INLINE_FILE_BYTES).default(MAX_INLINE_FILE_BYTES),
  /** Timeout of a workspace push, pull or diff on the runner (it extracts or packs the whole archive). */
  PADDOCK_WORKSPACE_RPC_TIMEOUT_MS: envSchemas.positiveMs.default(120_000),
  /** Presence heartbeat period per session while terminal clients are attached here. */
  PADDOCK_PRESENCE_INTERVAL_MS: envSchemas.positiveMs.default(5_000),
  /**
   * Browser origins allowed to open the terminal WebSocket (comma list, exact
   * `scheme://host[:port]`). An upgrade with any other Origin is 403; empty allows
   * none. Clients that send no Origin (CLI, services) are not affected.
   */
  PADDOCK_ALLOWED_ORIGINS: z
    .string()
    .default("")
    .transform((v) => v.split(",").map((o) => o.trim().toLowerCase()).filter((o) => o !== "")),
  /** Input frames (binary or text) a terminal socket may send per second; past it the socket is not read until the second ends (nothing is dropped). */
  PADDOCK_WS_INPUT_FRAMES_PER_SECOND: z.coerce.number().int().positive().default(200),
  /** Terminal sockets one session may have open through one gateway replica; more is 429 before the upgrade. */
  PADDOCK_MAX_ATTACH_PER_SESSION: z.coerce.number().int().positive().default(32),
  /** Creates (sessions and tokens) per minute per token, per replica; more is 429 `rate_limited` with Retry-After. */
  PADDOCK_CREATES_PER_MINUTE: z.coerce.number().int().positive().default(600),
  /** AES-256-GCM key sealing secret values in KV `secrets` (64 hex chars or base64 of 32 bytes); unset stores them as is. */
  PADDOCK_SECRETS_KEY: SecretsKeySetting,
  /** `1`: webhooks may target private, loopback and link-local addresses (a deployment's own receivers, tests); refused otherwise. */
  PADDOCK_WEBHOOK_ALLOW_PRIVATE: envSchemas.flag.default(false),
  /** A request whose headers are not complete this long after it started is answered 408 and closed (slow-header clients). */
  PADDOCK_HTTP_HEADERS_TIMEOUT_MS: envSchemas.positiveMs.default(10_000),
  /** Open connections (HTTP and WebSocket) in all; more are answered 503 at once. */
  PADDOCK_HTTP_MAX_CONNECTIONS: z.coerce.number().int().positive().default(16_384),
  /**
   * Previews by host (docs/ports.md): `<port>-<session>.<host>` of this
   * origin reaches that port, every path the app's. Unset: previews by path only.
   */
  PADDOCK_PREVIEW_ORIGIN: z
    .url({ protocol: /^https?$/ })
    .refine((u) => {
      // Runs after a failed url check too: an unparsable value is simply refused.
      const url = URL.parse(u);
      return url !== null && url.pathname === "/" && url.search === "" && url.hash === "" && url.username === "" && !/^[\d.]+$|^\[/.test(url.hostname);
    }, "scheme://host[:port] with a DNS name (no path, query or credentials)")
    .optional(),
  /**
   * The web console's build served at `/` (index.html and hashed `assets/`),
   * read once at start. Missing or without index.html: `/` answers 503 saying
   * how to build it; the API is unaffected.
   */
  PADDOCK_CONSOLE_DIR: z
    .string()
    .min(1)
    .default(DEFAULT_CONSOLE_DIR)
    .transform((d) => resolve(d)),
  /** Open connections from one client address; more are answered 429 at once. */
  PADDOCK_HTTP_MAX_CONNECTIONS_PER_ADDRESS: z.coerce.number().int().positive().default(2_048),
  /**
   * The gateway as people's browsers reach it (`https://paddock.example.com`):
   * the single sign-on redirect URI is `<this>/v1/auth/oidc/callback`. Unset:
   * built from the sign-in request's Host as http:// (development on loopback).
   */
  PADDOCK_PUBLIC_URL: z
    .url({ protocol: /^https?$/ })
    .refine((u) => URL.parse(u)?.search === "" && URL.parse(u)?.hash === "" && URL.parse(u)?.username === "", "scheme://host[:port][/path] (no query, fragment or credentials)")
    .transform((u) => u.replace(/\/+$/, ""))
    .optional(),
  /** Single sign-on through this OpenID Connect provider (docs/auth.md); unset: off. https, or http on a loopback address. */
  PADDOCK_OIDC_ISSUER: z
    .url({ protocol: /^https?$/ })
    .refine((u) => URL.parse(u)?.protocol === "https:" || isLoopback(URL.parse(u)?.hostname ?? ""), "https:// (http:// only on a loopback address)")
    .optional(),
  /** The console's client at the provider; the gateway is its relying party (authorization code, PKCE S256). */
  PADDOCK_OIDC_CLIENT_ID: z.string().min(1).max(256).optional(),
  /** That client's secret, when it is confidential (also as PADDOCK_OIDC_CLIENT_SECRET_FILE). */
  PADDOCK_OIDC_CLIENT_SECRET: z.string().min(1).optional(),
  /** The CLI's public native client (loopback redirects, device grant): ID tokens issued to it are exchanged for Paddock tokens. */
  PADDOCK_OIDC_CLI_CLIENT_ID: z.string().min(1).max(256).optional(),
  /** The ID token claim that names the actor (`email`, `sub`, `preferred_username`, ...); `email` must be verified. */
  PADDOCK_OIDC_ACTOR_CLAIM: z.string().regex(/^[A-Za-z0-9_.:-]{1,64}$/).default("email"),
  /** Scopes asked for; must include openid. */
  PADDOCK_OIDC_SCOPES: z
    .string()
    .default("openid email profile")
    .refine((v) => v.split(" ").includes("openid"), "must include openid"),
  /** Lifetime of a Paddock token minted by single sign-on. */
  PADDOCK_OIDC_TOKEN_TTL_MS: envSchemas.positiveMs.min(60_000).max(MAX_TOKEN_LIFETIME_MS).default(12 * 60 * 60_000),
  /**
   * Runners that join (deploy/runner/README.md): the account nkey seed (`SA...`;
   * best as PADDOCK_AUTH_CALLOUT_ISSUER_SEED_FILE) whose public key is the
   * nats-server's `auth_callout.issuer`. Set: this gateway answers the
   * server's auth callout and the join routes work. Unset: they are not_found.
   */
  PADDOCK_AUTH_CALLOUT_ISSUER_SEED: z.string().regex(/^SA[A-Z2-7]{56}$/, "an account nkey seed (SA..., 58 characters)").optional(),
  /** The system-account user's nkey seed (`SU...`; or _FILE): closes a revoked runner's live connections. Unset: revoke only refuses new ones. */
  PADDOCK_NATS_SYSTEM_SEED: z.string().regex(/^SU[A-Z2-7]{56}$/, "a user nkey seed (SU..., 58 characters)").optional(),
  /** NATS URLs a joining runner is told to use (comma-separated): where runner hosts reach NATS. Default PADDOCK_NATS_URL. */
  PADDOCK_RUNNER_NATS_URLS: z.string().min(1).max(4096).optional(),
  /** How long the credentials the callout issues a runner last; it then reconnects and is checked again. */
  PADDOCK_RUNNER_CREDENTIALS_TTL_MS: envSchemas.positiveMs.min(60_000).max(7 * 24 * 60 * 60_000).default(60 * 60_000),
});

/** Runners that join: settings of the auth callout, the join routes and revocation; undefined without an issuer seed. */
function runnerJoinConfig(e: z.infer<typeof GatewayEnv>) {
  if (e.PADDOCK_AUTH_CALLOUT_ISSUER_SEED === undefined) {
    if (e.PADDOCK_NATS_SYSTEM_SEED !== undefined) throw new ConfigError("invalid configuration: PADDOCK_NATS_SYSTEM_SEED: needs PADDOCK_AUTH_CALLOUT_ISSUER_SEED");
    return undefined;
  }
  const urls = (e.PADDOCK_RUNNER_NATS_URLS ?? e.PADDOCK_NATS_URL).split(",").map((u) => u.trim()).filter((u) => u.length > 0);
  return { issuerSeed: e.PADDOCK_AUTH_CALLOUT_ISSUER_SEED, systemSeed: e.PADDOCK_NATS_SYSTEM_SEED, natsUrls: urls, credentialsTtlMs: e.PADDOCK_RUNNER_CREDENTIALS_TTL_MS };
}
export type RunnerJoinConfig = NonNullable<ReturnType<typeof runnerJoinConfig>>;

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "[::1]" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** Single sign-on's settings; undefined when no issuer is configured. */
function oidcConfig(e: z.infer<typeof GatewayEnv>) {
  if (e.PADDOCK_OIDC_ISSUER === undefined) return undefined;
  if (e.PADDOCK_OIDC_CLIENT_ID === undefined && e.PADDOCK_OIDC_CLI_CLIENT_ID === undefined) {
    throw new ConfigError("invalid configuration: PADDOCK_OIDC_ISSUER: set PADDOCK_OIDC_CLIENT_ID (console), PADDOCK_OIDC_CLI_CLIENT_ID (CLI) or both");
  }
  if (e.PADDOCK_OIDC_CLIENT_SECRET !== undefined && e.PADDOCK_OIDC_CLIENT_ID === undefined) {
    throw new ConfigError("invalid configuration: PADDOCK_OIDC_CLIENT_SECRET: needs PADDOCK_OIDC_CLIENT_ID");
  }
  return {
    issuer: e.PADDOCK_OIDC_ISSUER,
    clientId: e.PADDOCK_OIDC_CLIENT_ID,
    clientSecret: e.PADDOCK_OIDC_CLIENT_SECRET,
    cliClientId: e.PADDOCK_OIDC_CLI_CLIENT_ID,
    actorClaim: e.PADDOCK_OIDC_ACTOR_CLAIM,
    scopes: e.PADDOCK_OIDC_SCOPES,
    tokenTtlMs: e.PADDOCK_OIDC_TOKEN_TTL_MS,
  };
}
export type OidcConfig = NonNullable<ReturnType<typeof oidcConfig>>;

/** The gateway's settings, named as it uses them; the type is inferred from GatewayEnv (no hand-written twin). */
export function loadConfig(env: Record<string, string | undefined>) {
  const e = parseEnv(GatewayEnv, env);
  return {
    ...commonConfig(e),
    httpHost: e.PADDOCK_HTTP_HOST,
    httpPort: e.PADDOCK_HTTP_PORT,
    devToken: e.PADDOCK_DEV_TOKEN,
    devWorkspace: e.PADDOCK_DEV_WORKSPACE,
    devActor: e.PADDOCK_DEV_ACTOR,
    maxBodyBytes: e.PADDOCK_MAX_BODY_BYTES,
    wsMaxPayloadBytes: e.PADDOCK_WS_MAX_PAYLOAD_BYTES,
    wsSendBufferBytes: e.PADDOCK_WS_SEND_BUFFER_BYTES,
    rpcTimeoutMs: e.PADDOCK_RPC_TIMEOUT_MS,
    presenceIntervalMs: e.PADDOCK_PRESENCE_INTERVAL_MS,
    maxUploadBytes: e.PADDOCK_MAX_UPLOAD_BYTES,
    filesInlineMaxBytes: e.PADDOCK_FILES_INLINE_MAX_BYTES,
    workspaceRpcTimeoutMs: e.PADDOCK_WORKSPACE_RPC_TIMEOUT_MS,
    allowedOrigins: e.PADDOCK_ALLOWED_ORIGINS,
    wsInputFramesPerSecond: e.PADDOCK_WS_INPUT_FRAMES_PER_SECOND,
    maxAttachPerSession: e.PADDOCK_MAX_ATTACH_PER_SESSION,
    createsPerMinute: e.PADDOCK_CREATES_PER_MINUTE,
    secretsKey: e.PADDOCK_SECRETS_KEY,
    webhookAllowPrivate: e.PADDOCK_WEBHOOK_ALLOW_PRIVATE,
    previewOrigin: e.PADDOCK_PREVIEW_ORIGIN,
    httpHeadersTimeoutMs: e.PADDOCK_HTTP_HEADERS_TIMEOUT_MS,
    httpMaxConnections: e.PADDOCK_HTTP_MAX_CONNECTIONS,
    httpMaxConnectionsPerAddress: e.PADDOCK_HTTP_MAX_CONNECTIONS_PER_ADDRESS,
    consoleDir: e.PADDOCK_CONSOLE_DIR,
    publicUrl: e.PADDOCK_PUBLIC_URL,
    oidc: oidcConfig(e),
    runnerJoin: runnerJoinConfig(e),
  };
}

export type GatewayConfig = ReturnType<typeof loadConfig>;

/** Defaults for a gateway constructed directly (tests). */
export function defaultConfig(overrides: Partial<GatewayConfig> = {}): GatewayConfig {
  return { ...loadConfig({}), ...overrides };
}
