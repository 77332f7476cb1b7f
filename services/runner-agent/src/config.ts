import { cpus, totalmem } from "node:os";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { Id } from "@paddock/contracts";
import { commonConfig, commonEnv, ConfigError, envSchemas, FILE_SECRET_SETTINGS, parseEnv } from "@paddock/config";
import { SecretsKeySetting } from "@paddock/bus";
import type { SandboxLimits } from "./sandbox/bwrap/limits.ts";
import { DEFAULT_COALESCE_MS, type TerminalSettings } from "./terminal/term-options.ts";
import { ImagesConfig } from "./images/config.ts";
import { CheckpointCompression, CheckpointFormat, RESTORE_WORKERS_MIN_CHUNKS } from "./workspace/checkpoint.ts";
import type { WorkspaceLimits } from "./workspace/workspace-ops.ts";

/** Where the bootstrap builds the exec init: beside its source. */
export const DEFAULT_INIT_PATH = fileURLToPath(new URL("../native/paddock-init", import.meta.url));
/** The file-exchange addon (native/fs-exchange.c, decision 0069), built beside its source like the exec init. */
export const FS_EXCHANGE_ADDON_PATH = fileURLToPath(new URL("../native/fs-exchange.node", import.meta.url));

const commaList = z
  .string()
  .default("")
  .transform((s) =>
    s
      .split(",")
      .map((c) => c.trim())
      .filter((c) => c.length > 0),
  );
const capabilities = commaList.pipe(z.array(z.string().min(1).max(64)).max(64));
/** host[:port], as image references name registries (no scheme, no path). */
const registryHosts = commaList.pipe(z.array(z.string().regex(/^[A-Za-z0-9.-]+(:\d{1,5})?$/, "host[:port], no scheme or path").max(255)).max(64));

/** `host:port` (IPv6 in brackets) or `off`. */
const dataListen = z.union([
  // false, not undefined: zod's default would stand in for an undefined output too.
  z.literal("off").transform(() => false as const),
  z
    .string()
    .regex(/^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, "host:port ([v6]:port), or off")
    .transform((s) => {
      const at = s.lastIndexOf(":");
      return { host: s.slice(0, at).replace(/^\[|\]$/g, ""), port: Number(s.slice(at + 1)) };
    })
    .pipe(z.object({ host: z.string(), port: z.number().int().min(0).max(65_535) })),
]);
const WILDCARD_HOSTS = ["0.0.0.0", "::", ""];

const RunnerEnv = z
  .object({
    ...commonEnv,
    PADDOCK_RUNNER_ID: Id,
    PADDOCK_POOL_ID: Id.default("default"),
    PADDOCK_RUNNER_CAPACITY: z.coerce.number().int().nonnegative().max(100_000).default(8),
    PADDOCK_RUNNER_DATA_DIR: z.string().min(1),
    PADDOCK_RUNNER_CAPABILITIES: capabilities,
    PADDOCK_RUNNER_LEASE_RENEW_MS: envSchemas.positiveMs.default(2_000),
    /**
     * How long the lease key lives without a renewal; the server expires it (and
     * writes the delete marker the scheduler watches). Whole seconds: the server
     * expires at second granularity, so it is rounded up.
     */
    PADDOCK_RUNNER_LEASE_TTL_MS: envSchemas.positiveMs.min(1_000).default(10_000),
    /** Resources one session may use here; defaults: every core, all memory, the free disk of the data dir. */
    PADDOCK_RUNNER_CPU_MILLIS: z.coerce.number().int().nonnegative().optional(),
    PADDOCK_RUNNER_MEMORY_BYTES: z.coerce.number().int().nonnegative().optional(),
    PADDOCK_RUNNER_DISK_BYTES: z.coerce.number().int().nonnegative().optional(),
    PADDOCK_RUNNER_KILL_GRACE_MS: envSchemas.positiveMs.default(5_000),
    /**
     * How often the runner asks which sessions it has held this long ended
     * without their teardown reaching it (held-check.ts); 0 never asks.
     */
    PADDOCK_RUNNER_HELD_CHECK_MS: z.coerce.number().int().nonnegative().max(3_600_000).default(30_000),
    /** How long one registration request waits for a scheduler before retrying. */
    PADDOCK_RUNNER_REGISTER_TIMEOUT_MS: envSchemas.positiveMs.default(2_000),
    /** Public URL of the gateway, given to sessions with a token as PADDOCK_URL. */
    PADDOCK_GATEWAY_URL: z.url().optional(),
    /** Watch mode: quiet time after a workspace change before the apps reload. */
    PADDOCK_RUNNER_WATCH_DEBOUNCE_MS: envSchemas.positiveMs.default(200),
    /** Watch mode: at most this many reloads per session per window; further changes are ignored. */
    PADDOCK_RUNNER_WATCH_MAX_RELOADS: z.coerce.number().int().positive().max(10_000).default(10),
    PADDOCK_RUNNER_WATCH_WINDOW_MS: envSchemas.positiveMs.default(60_000),
    /** Watch mode: how long after an app generation starts its own writes are told from a user's (watch-reload.ts). */
    PADDOCK_RUNNER_WATCH_SETTLE_MS: envSchemas.positiveMs.default(2_000),
    /** How often the runner reports which sessions had terminal output (the schedulers' idle policy). */
    PADDOCK_RUNNER_ACTIVITY_MS: envSchemas.positiveMs.default(30_000),
    /** The data plane (decision 0052): where previews' bytes are carried to gateways, off the bus; `off` keeps them on the bus. */
    PADDOCK_RUNNER_DATA_LISTEN: dataListen.default({ host: "127.0.0.1", port: 0 }),
    /** The host gateways dial for the data plane; the listen host when absent (required when that is a wildcard). */
    PADDOCK_RUNNER_DATA_ADVERTISE: z.string().regex(/^[A-Za-z0-9.:-]{1,255}$/).optional(),
    /** Workspace push: most entries and uncompressed bytes one archive may hold (more is too_large). */
    PADDOCK_RUNNER_WORKSPACE_MAX_ENTRIES: z.coerce.number().int().positive().default(100_000),
    PADDOCK_RUNNER_WORKSPACE_MAX_BYTES: z.coerce.number().int().positive().default(2 * 1024 * 1024 * 1024),
    /** Workspace diff: bytes kept per repository and in total (a reply must fit a NATS message), and most repositories. */
    PADDOCK_RUNNER_DIFF_MAX_REPO_BYTES: z.coerce.number().int().positive().default(256 * 1024),
    PADDOCK_RUNNER_DIFF_MAX_BYTES: z.coerce.number().int().positive().max(768 * 1024).default(512 * 1024),
    PADDOCK_RUNNER_DIFF_MAX_REPOS: z.coerce.number().int().positive().max(256).default(32),
    /**
     * Terminal log: how long output that keeps arriving is held to fill a
     * chunk (term-writer.ts); 0 publishes as soon as nothing is in flight.
     */
    PADDOCK_RUNNER_TERM_COALESCE_MS: z.coerce.number().int().nonnegative().max(1_000).default(DEFAULT_COALESCE_MS),
    /**
     * Checkpoints (cold suspend, snapshots, environment snapshots): gzip (the
     * default; smaller objects) or none (no deflate, roughly twice as fast to
     * take and restore where the object store is near; about 1.7x the bytes
     * on a typical workspace). Restores read either.
     */
    PADDOCK_RUNNER_CHECKPOINT_COMPRESSION: z.enum(CheckpointCompression).default(CheckpointCompression.gzip),
    /**
     * Checkpoints as manifests of chunks (the default: a checkpoint stores
     * only what changed since the last one; docs/decisions/0062) or as whole
     * tars (compressed as above). Restores read every format.
     */
    PADDOCK_RUNNER_CHECKPOINT_FORMAT: z.enum(CheckpointFormat).default(CheckpointFormat.manifest),
    /**
     * A manifest restore of at least this many chunks is written by the
     * restore workers (decision 0067); a smaller one on the event loop, where
     * it is done before two threads and their connections would have started.
     */
    PADDOCK_RUNNER_RESTORE_WORKERS_MIN_CHUNKS: z.coerce.number().int().nonnegative().max(1_000_000_000).default(RESTORE_WORKERS_MIN_CHUNKS),
    /** Screen checkpoints (screen-tracker.ts): written once an app's output was quiet this long... */
    PADDOCK_RUNNER_SCREEN_QUIET_MS: envSchemas.positiveMs.max(60_000).default(200),
    /** ...and at most this often per app (also while output never stops); 0 writes none. */
    PADDOCK_RUNNER_SCREEN_INTERVAL_MS: z.coerce.number().int().nonnegative().max(3_600_000).default(5_000),
    /**
     * What sessions run in: \`process\` (plain processes of the runner's user,
     * not isolated: development only), \`bwrap\` (namespace-isolated; the
     * runner fails to start where it does not work), or \`auto\` (bwrap when
     * its probe at start succeeds, else process).
     */
    PADDOCK_SANDBOX: z.enum(["auto", "bwrap", "process"]).default("auto"),
    /** bwrap: the host uids sessions run as (one each), first and count; never 0 or the runner's. Every process of the range is killed at start: runners sharing a host need disjoint ranges. */
    PADDOCK_SANDBOX_UID_FIRST: z.coerce.number().int().positive().max(2 ** 31 - 70_000).default(200_000),
    PADDOCK_SANDBOX_UID_COUNT: z.coerce.number().int().positive().max(16_384).default(1_024),
    /** bwrap: sandboxes kept started ahead of creates (a create takes one instead of launching its own; 0: none). Default 2. */
    PADDOCK_SANDBOX_WARM_POOL: z.coerce.number().int().min(0).max(64).optional(),
    /** bwrap: the most processes (and threads) a session's uid may have at once (RLIMIT_NPROC); a fork bomb stops there. */
    PADDOCK_SANDBOX_PROCESSES: z.coerce.number().int().min(16).max(1_000_000).default(4_096),
    /**
     * bwrap: names this runner's network namespaces, interfaces and nftables
     * table. Unset (the usual): the runner claims a free one of the host,
     * \`h<n>\` with prefix 10.(100+n), so runners sharing a host never collide.
     */
    PADDOCK_SANDBOX_NET_INSTANCE: z.string().regex(/^[a-z0-9]{1,4}$/).optional(),
    /** bwrap: the IPv4 /16 sessions' links are cut from, as its first two octets (\`10.213\`; unset: the claimed instance's, or 10.213 with a configured one). */
    PADDOCK_SANDBOX_NET_PREFIX: z
      .string()
      .regex(/^(\d{1,3})\.(\d{1,3})$/)
      .transform((s) => s.split(".").map(Number) as [number, number])
      .refine((p) => p.every((o) => o <= 255), "octets are 0-255")
      .optional(),
    /** bwrap: per-session rlimits, always enforced (processes: PADDOCK_SANDBOX_PROCESSES): open files per process, the largest file a process may write. */
    PADDOCK_SANDBOX_MAX_OPEN_FILES: z.coerce.number().int().positive().max(1_048_576).default(4_096),
    PADDOCK_SANDBOX_MAX_FILE_SIZE_BYTES: z.coerce.number().int().positive().max(2 ** 53 - 1).default(8 * 1024 ** 3),
    /** bwrap: per-session cgroup limits, enforced only where the host delegates a cgroup v2 subtree with memory, cpu and pids to the runner or mounts those v1 hierarchies writable (its capabilities say `limits:cgroup`). */
    PADDOCK_SANDBOX_MEMORY_MAX_BYTES: z.coerce.number().int().positive().max(2 ** 53 - 1).default(4 * 1024 ** 3),
    /** Millicores: 1000 is one core. */
    PADDOCK_SANDBOX_CPU_MILLIS: z.coerce.number().int().min(10).max(1_024_000).default(2_000),
    PADDOCK_SANDBOX_PIDS_MAX: z.coerce.number().int().positive().max(4_194_304).default(4_096),
    /**
     * bwrap: host directories bound writable, at the same path, into every
     * session (comma-separated absolute paths): a shared cache, a harness's
     * observation dir. Whatever is in them is every session's; never the data
     * dir or a credential file's directory.
     */
    /**
     * bwrap: the exec init (native/paddock-init.c built static: \`npm test\`,
     * \`npm run up\` build it there). Absent: every exec is a launch of its
     * own (tens of ms, and its own pid namespace), with a warning at start.
     */
    PADDOCK_SANDBOX_INIT: z.string().startsWith("/").default(DEFAULT_INIT_PATH),
    PADDOCK_SANDBOX_SHARED_DIRS: z
      .string()
      .optional()
      .transform((s) => (s ?? "").split(",").map((d) => d.trim()).filter(Boolean))
      .refine((dirs) => dirs.every((d) => d.startsWith("/") && d !== "/" && !d.split("/").includes("..")), "absolute directories, not / and without ..")
      .refine((dirs) => dirs.every((d) => !/[,\0]/.test(d)), "no commas or NULs in a path"),
    /** Images (bwrap): host[:port] of registries pulled from over plain HTTP (a loopback registry, a local mirror), comma-separated. */
    PADDOCK_IMAGE_INSECURE_REGISTRIES: registryHosts,
    /** Images (bwrap): unpacked roots kept under <data dir>/images; images no session uses are evicted past it. */
    PADDOCK_IMAGE_CACHE_MAX_BYTES: z.coerce.number().int().positive().optional(),
    /** Opens secret values sealed by the gateway (same key); unset reads them unencrypted. */
    PADDOCK_SECRETS_KEY: SecretsKeySetting,
    /** Handed to session processes (their env is otherwise minimal). */
    PATH: z.string().default("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
  })
  .refine((e) => e.PADDOCK_RUNNER_LEASE_RENEW_MS < e.PADDOCK_RUNNER_LEASE_TTL_MS, {
    path: ["PADDOCK_RUNNER_LEASE_RENEW_MS"],
    message: "must be less than PADDOCK_RUNNER_LEASE_TTL_MS",
  })
  .refine((e) => e.PADDOCK_RUNNER_DATA_LISTEN === false || !WILDCARD_HOSTS.includes(e.PADDOCK_RUNNER_DATA_LISTEN.host) || e.PADDOCK_RUNNER_DATA_ADVERTISE !== undefined, {
    path: ["PADDOCK_RUNNER_DATA_ADVERTISE"],
    message: "required when PADDOCK_RUNNER_DATA_LISTEN listens on every address (gateways cannot dial a wildcard)",
  });

/** The runner's settings (inferred from RunnerEnv, no hand-written twin); everything else takes a RunnerConfig. */
export type RunnerConfig = ReturnType<typeof loadConfig>;

/** The directories of the credential files the runner is given by path (…_FILE settings). */
function secretFileDirs(env: Record<string, string | undefined>): string[] {
  const files = ["PADDOCK_NATS_CREDS_FILE", ...FILE_SECRET_SETTINGS.map((name) => `${name}_FILE`)].map((name) => env[name]);
  return [...new Set(files.filter((f): f is string => f !== undefined && f.length > 0).map((f) => dirname(resolve(f))))];
}

/** The shared dirs, refused where one holds or lies in what sessions must never see. */
function sharedDirs(dirs: string[], secret: readonly string[]): string[] {
  const within = (a: string, b: string) => a === b || a.startsWith(`${b}/`);
  for (const dir of dirs.map((d) => resolve(d))) {
    const clash = secret.map((s) => resolve(s)).find((s) => within(dir, s) || within(s, dir));
    if (clash !== undefined) throw new ConfigError(`invalid configuration: PADDOCK_SANDBOX_SHARED_DIRS: ${dir} overlaps ${clash}, which sessions never see`);
  }
  return dirs.map((d) => resolve(d));
}

/** The only reader of the environment. */
export function loadConfig(env: Record<string, string | undefined>) {
  const e = parseEnv(RunnerEnv, env);
  const credentialDirs = secretFileDirs(env);
  return {
    ...commonConfig(e),
    runnerId: e.PADDOCK_RUNNER_ID,
    poolId: e.PADDOCK_POOL_ID,
    capacityTotal: e.PADDOCK_RUNNER_CAPACITY,
    dataDir: e.PADDOCK_RUNNER_DATA_DIR,
    capabilities: e.PADDOCK_RUNNER_CAPABILITIES,
    leaseRenewMs: e.PADDOCK_RUNNER_LEASE_RENEW_MS,
    leaseTtlMs: e.PADDOCK_RUNNER_LEASE_TTL_MS,
    cpuMillis: e.PADDOCK_RUNNER_CPU_MILLIS ?? Math.max(1, cpus().length) * 1000,
    memoryBytes: e.PADDOCK_RUNNER_MEMORY_BYTES ?? totalmem(),
    diskBytes: e.PADDOCK_RUNNER_DISK_BYTES,
    killGraceMs: e.PADDOCK_RUNNER_KILL_GRACE_MS,
    heldCheckMs: e.PADDOCK_RUNNER_HELD_CHECK_MS,
    registerTimeoutMs: e.PADDOCK_RUNNER_REGISTER_TIMEOUT_MS,
    childPath: e.PATH,
    gatewayUrl: e.PADDOCK_GATEWAY_URL,
    watchDebounceMs: e.PADDOCK_RUNNER_WATCH_DEBOUNCE_MS,
    watchMaxReloads: e.PADDOCK_RUNNER_WATCH_MAX_RELOADS,
    watchWindowMs: e.PADDOCK_RUNNER_WATCH_WINDOW_MS,
    watchSettleMs: e.PADDOCK_RUNNER_WATCH_SETTLE_MS,
    activityMs: e.PADDOCK_RUNNER_ACTIVITY_MS,
    workspace: {
      maxEntries: e.PADDOCK_RUNNER_WORKSPACE_MAX_ENTRIES,
      maxBytes: e.PADDOCK_RUNNER_WORKSPACE_MAX_BYTES,
      diffMaxRepoBytes: e.PADDOCK_RUNNER_DIFF_MAX_REPO_BYTES,
      diffMaxBytes: e.PADDOCK_RUNNER_DIFF_MAX_BYTES,
      diffMaxRepos: e.PADDOCK_RUNNER_DIFF_MAX_REPOS,
    } satisfies WorkspaceLimits,
    secretsKey: e.PADDOCK_SECRETS_KEY,
    dataPlane: e.PADDOCK_RUNNER_DATA_LISTEN === false ? undefined : { ...e.PADDOCK_RUNNER_DATA_LISTEN, advertiseHost: e.PADDOCK_RUNNER_DATA_ADVERTISE ?? e.PADDOCK_RUNNER_DATA_LISTEN.host },
    sandbox: {
      backend: e.PADDOCK_SANDBOX,
      // Where the runner's credential files live (a deployment's secrets dir, \`npm run up\`'s data dir): no session sees them.
      hide: credentialDirs,
      shared: sharedDirs(e.PADDOCK_SANDBOX_SHARED_DIRS, [e.PADDOCK_RUNNER_DATA_DIR, ...credentialDirs]),
      // Optional to the backend: settings built elsewhere (tests, the process fallback) may go without.
      init: e.PADDOCK_SANDBOX_INIT as string | undefined,
      uidFirst: e.PADDOCK_SANDBOX_UID_FIRST,
      uidCount: e.PADDOCK_SANDBOX_UID_COUNT,
      netInstance: e.PADDOCK_SANDBOX_NET_INSTANCE,
      netPrefix: e.PADDOCK_SANDBOX_NET_PREFIX,
      ...(e.PADDOCK_SANDBOX_WARM_POOL !== undefined ? { warmPool: e.PADDOCK_SANDBOX_WARM_POOL } : {}),
      limits: {
        rlimits: { processes: e.PADDOCK_SANDBOX_PROCESSES, openFiles: e.PADDOCK_SANDBOX_MAX_OPEN_FILES, fileSizeBytes: e.PADDOCK_SANDBOX_MAX_FILE_SIZE_BYTES },
        cgroup: { memoryMaxBytes: e.PADDOCK_SANDBOX_MEMORY_MAX_BYTES, cpuMaxMicros: e.PADDOCK_SANDBOX_CPU_MILLIS * 100, pidsMax: e.PADDOCK_SANDBOX_PIDS_MAX },
      } satisfies SandboxLimits,
    },
    images: ImagesConfig.parse({ insecureRegistries: e.PADDOCK_IMAGE_INSECURE_REGISTRIES, ...(e.PADDOCK_IMAGE_CACHE_MAX_BYTES !== undefined ? { maxCacheBytes: e.PADDOCK_IMAGE_CACHE_MAX_BYTES } : {}) }),
    checkpointCompression: e.PADDOCK_RUNNER_CHECKPOINT_COMPRESSION,
    checkpointFormat: e.PADDOCK_RUNNER_CHECKPOINT_FORMAT,
    restoreWorkersMinChunks: e.PADDOCK_RUNNER_RESTORE_WORKERS_MIN_CHUNKS,
    terminal: {
      coalesceMs: e.PADDOCK_RUNNER_TERM_COALESCE_MS,
      screen: e.PADDOCK_RUNNER_SCREEN_INTERVAL_MS === 0 ? undefined : { quietMs: e.PADDOCK_RUNNER_SCREEN_QUIET_MS, intervalMs: e.PADDOCK_RUNNER_SCREEN_INTERVAL_MS },
    } satisfies TerminalSettings,
  };
}
