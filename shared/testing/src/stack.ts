import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { startNatsServer, type NatsServerHandle } from "./nats-server.ts";
import { startService, type ServiceProcess } from "./process.ts";
import { connectAs, ControlPlaneUsers, natsAuthConfig, runnerUser, type NatsCalloutOptions, type RunnerPrincipal } from "./nats-auth.ts";
import { writeStackSecretFiles, type StackSecretFiles } from "./stack-secrets.ts";

export interface Stack {
  nats: NatsServerHandle;
  /** Base URL of the gateway, e.g. http://127.0.0.1:34567 */
  url: string;
  /** The dev token: an admin of workspace "default", actor "dev". */
  token: string;
  scheduler: ServiceProcess;
  recorder: ServiceProcess;
  gateway: ServiceProcess;
  runners: ServiceProcess[];
  dataDir: string;
  /** Env every service of this stack shares (NATS URL, log level, ...). */
  commonEnv: Record<string, string>;
  /**
   * With `isolated`: user → password of every NATS principal (the services,
   * each declared runner, and `provisioner`, the storage admin tests connect as).
   */
  natsUsers?: Record<string, string>;
  /** With `secretFiles`: where each secret is (0600 files in the data dir). */
  secretFiles?: StackSecretFiles;
  /** Starts one more runner-agent process on this stack. */
  addRunner(opts?: RunnerOptions): Promise<ServiceProcess>;
  /** Stops every process; with keepData the data dir and NATS store stay on disk (the caller removes them). */
  stop(opts?: { keepData?: boolean }): Promise<void>;
}

export interface RunnerOptions {
  runnerId?: string;
  poolId?: string;
  capacity?: number;
  env?: Record<string, string>;
  /** A command the runner-agent runs under (StartServiceOptions.wrap): a runner of its own user. */
  wrap?: readonly string[];
  /** With the stack's `built`: this runner's bundle (e.g. inside a production deploy of it). */
  entry?: string;
}

export interface StackOptions {
  runners?: number;
  runnerCapacity?: number;
  /** Extra env per service name. */
  env?: Partial<Record<"scheduler" | "event-recorder" | "gateway" | "runner-agent", Record<string, string>>>;
  /**
   * Per-service NATS credentials (deploy/nats/README-isolation.md): the server
   * gets the `natsAuthConfig` users and each service connects as its own user.
   * Runners must be declared up front (default: `runner-1..N` of pool
   * `default`); `addRunner` of an undeclared one fails. Off by default.
   */
  isolated?: boolean | { runners?: RunnerPrincipal[]; extraConfig?: string; callout?: NatsCalloutOptions };
  /**
   * Services also check the messages they send against their schemas
   * (`PADDOCK_VALIDATE_OUTGOING`; receivers always check). On by default here, so a
   * sender's contract bug fails a test where it happens; the benchmarks run
   * the deployed default (off).
   */
  validateOutgoing?: boolean;
  /** Where the data dir is made (default: the OS temp dir). */
  dataDirParent?: string;
  /**
   * Secrets as `npm run up` passes them: 0600 files in the data dir (dev token,
   * session-token secret, secrets key, and with `isolated` one NATS credentials
   * file per service), named by `<NAME>_FILE` / PADDOCK_NATS_CREDS_FILE.
   */
  secretFiles?: boolean;
  /** Every service runs its production bundle (`npm run build`) with plain `node`, no TypeScript loader. */
  built?: boolean;
  /**
   * The IPv4 address nats-server and the gateway listen on, and their URLs
   * name (127.0.0.1 by default): a bridge address runners in other network
   * namespaces reach (net-hosts.ts).
   */
  listenHost?: string;
}

/**
 * Brings up the whole system as separate OS processes against a fresh
 * nats-server: scheduler, event-recorder, gateway and N runner-agents.
 */
export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  const isolation = opts.isolated ? isolationOf(opts.isolated, opts.runners ?? 1) : undefined;
  const listenHost = opts.listenHost ?? "127.0.0.1";
  const nats = await startNatsServer({ ...(isolation ? { extraConfig: isolation.config } : {}), ...(opts.listenHost !== undefined ? { host: opts.listenHost } : {}) });
  const dataDir = mkdtempSync(join(opts.dataDirParent ?? tmpdir(), "paddock-stack-"));
  // Passable (not listable): a bwrap runner's sessions bind their directories below it as their own uid.
  chmodSync(dataDir, 0o711);
  const token = `pdk_dev_${randomBytes(18).toString("hex")}`;
  const files = opts.secretFiles ? writeStackSecretFiles(dataDir, token, isolation?.passwords ?? {}) : undefined;
  const commonEnv = { PADDOCK_NATS_URL: nats.url, PADDOCK_LOG_LEVEL: "info", PADDOCK_OPS_PORT: "0", PADDOCK_VALIDATE_OUTGOING: String(opts.validateOutgoing ?? true) };
  const started: ServiceProcess[] = [];
  const credentials = (user: string): Record<string, string> => {
    if (!isolation) return {};
    if (files?.creds[user] !== undefined) return { PADDOCK_NATS_CREDS_FILE: files.creds[user] };
    const pass = isolation.passwords[user];
    if (pass === undefined) throw new Error(`isolated stack: no NATS user ${user} (declare the runner in isolated.runners)`);
    return { PADDOCK_NATS_USER: user, PADDOCK_NATS_PASS: pass };
  };
  const start = async (name: "scheduler" | "event-recorder" | "gateway" | "runner-agent", env: Record<string, string>, how: { wrap?: readonly string[] | undefined; entry?: string | undefined } = {}) => {
    const user = name === "runner-agent" ? runnerUser(env.PADDOCK_POOL_ID ?? "default", env.PADDOCK_RUNNER_ID ?? "") : name;
    const svc = await startService(name, { ...commonEnv, ...opts.env?.[name], ...env, ...credentials(user) }, {
      ...(how.wrap ? { wrap: how.wrap } : {}),
      ...(how.entry !== undefined ? { entry: how.entry } : {}),
      ...(opts.built === true ? { built: true } : {}),
    });
    started.push(svc);
    return svc;
  };
  let runnerCount = 0;
  let gatewayUrl = "";
  const addRunner = async (r: RunnerOptions = {}) => {
    runnerCount += 1;
    const runnerId = r.runnerId ?? `runner-${runnerCount}`;
    return start("runner-agent", {
      PADDOCK_GATEWAY_URL: gatewayUrl,
      PADDOCK_RUNNER_ID: runnerId,
      PADDOCK_POOL_ID: r.poolId ?? "default",
      PADDOCK_RUNNER_CAPACITY: String(r.capacity ?? opts.runnerCapacity ?? 8),
      PADDOCK_RUNNER_DATA_DIR: join(dataDir, runnerId),
      ...(files ? { PADDOCK_SECRETS_KEY_FILE: files.secretsKey } : {}),
      ...r.env,
    }, { wrap: r.wrap, entry: r.entry });
  };
  try {
    if (isolation) await provisionAs(nats.url, ControlPlaneUsers.provisioner, isolation.passwords[ControlPlaneUsers.provisioner] ?? "");
    const scheduler = await start("scheduler", files ? { PADDOCK_SESSION_TOKEN_SECRET_FILE: files.sessionTokenSecret } : { PADDOCK_SESSION_TOKEN_SECRET: randomBytes(24).toString("hex") });
    const recorder = await start("event-recorder", files ? { PADDOCK_SECRETS_KEY_FILE: files.secretsKey } : {});
    // Test workloads create far faster than a person; a test of the limit sets its own.
    const gateway = await start("gateway", { PADDOCK_CREATES_PER_MINUTE: "1000000", ...opts.env?.gateway, ...(opts.listenHost !== undefined ? { PADDOCK_HTTP_HOST: opts.listenHost } : {}), PADDOCK_HTTP_PORT: "0", ...(files ? { PADDOCK_DEV_TOKEN_FILE: files.devToken, PADDOCK_SECRETS_KEY_FILE: files.secretsKey } : { PADDOCK_DEV_TOKEN: token }) });
    gatewayUrl = `http://${listenHost}:${String(gateway.ready.httpPort)}`;
    const runners: ServiceProcess[] = [];
    for (let i = 0; i < (opts.runners ?? 1); i++) runners.push(await addRunner());
    return {
      nats,
      url: gatewayUrl,
      token,
      scheduler,
      recorder,
      gateway,
      runners,
      dataDir,
      commonEnv,
      ...(isolation ? { natsUsers: isolation.passwords } : {}),
      ...(files ? { secretFiles: files } : {}),
      addRunner,
      stop: async (stopOpts = {}) => {
        await Promise.all(started.map((s) => s.stop()));
        await nats.stop({ keepStore: stopOpts.keepData === true });
        if (!stopOpts.keepData) rmSync(dataDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await Promise.all(started.map((s) => s.kill()));
    await nats.stop();
    throw err;
  }
}

function isolationOf(isolated: true | { runners?: RunnerPrincipal[]; extraConfig?: string; callout?: NatsCalloutOptions }, count: number) {
  const declared = isolated === true ? undefined : isolated.runners;
  const runners = declared ?? Array.from({ length: count }, (_, i) => ({ poolId: "default", runnerId: `runner-${String(i + 1)}` }));
  const names = [...Object.values(ControlPlaneUsers), ...runners.map((r) => runnerUser(r.poolId, r.runnerId))];
  const passwords = Object.fromEntries(names.map((n) => [n, randomBytes(18).toString("hex")]));
  const extra = isolated === true ? "" : (isolated.extraConfig ?? "");
  const callout = isolated === true ? undefined : isolated.callout;
  return { passwords, config: natsAuthConfig({ runners, passwords, provisioner: true, ...(callout ? { callout } : {}) }) + extra };
}

/** In isolated mode storage is created once by the provisioner, before any service starts. */
async function provisionAs(url: string, user: string, pass: string): Promise<void> {
  const { provision } = await import("@paddock/bus");
  const nc = await connectAs(url, user, pass);
  try {
    await provision(nc, { replicas: 1 });
  } finally {
    await nc.close();
  }
}
