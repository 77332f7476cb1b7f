// `npm run up`: the whole system on this machine — a local nats-server with
// JetStream and one NATS user per service (no anonymous access), the four
// services and N runners — supervised: a process that exits is restarted with
// backoff; Ctrl-C stops everything. Then prints how to reach it.
import { createWriteStream } from "node:fs";
import { join, resolve } from "node:path";
import { provision } from "@paddock/bus";
import { FILE_SECRET_SETTINGS } from "@paddock/config";
import {
  connectAs,
  ControlPlaneUsers,
  natsAuthConfig,
  ObserverUser,
  parseScriptArgsOrExit,
  runnerUser,
  startNatsServer,
  startService,
  type ServiceName,
} from "@paddock/testing";
import { parseUpArgs, UP_USAGE, upPreviewOrigin } from "./up-args.ts";
import { childProc, Supervisor, type Unit } from "./supervisor.ts";
import { persistedSecret, privateDataDir, upCredentials } from "./up-secrets.ts";

const args = parseScriptArgsOrExit(UP_USAGE, parseUpArgs);
const dataDir = resolve(args.dataDir);
privateDataDir(dataDir);

const log = (line: string) => process.stderr.write(`up: ${line}\n`);

/**
 * Every PADDOCK_* variable of up's own environment reaches every service
 * (log level, limits, ...); what up sets itself wins: NATS URL and
 * credentials, ports, runner identities, keys.
 */
function passthroughEnv(env: NodeJS.ProcessEnv): Record<string, string> {
  // Settings that would contradict the files up passes (a service refuses both spellings).
  const own = new Set(["PADDOCK_NATS_USER", "PADDOCK_NATS_PASS", ...FILE_SECRET_SETTINGS]);
  return Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[0].startsWith("PADDOCK_") && e[1] !== undefined && !own.has(e[0])));
}

/** Creates the streams and buckets as the storage admin, before any service (they may only create what exists identically). */
async function provisionStorage(url: string, password: string): Promise<void> {
  const nc = await connectAs(url, ControlPlaneUsers.provisioner, password);
  try {
    await provision(nc, { replicas: 1 });
  } finally {
    await nc.close();
  }
}

async function main(): Promise<void> {
  const token = persistedSecret(dataDir, "dev-token", { prefix: "pdk_dev_" });
  persistedSecret(dataDir, "session-token-secret");
  persistedSecret(dataDir, "secrets-key", { bytes: 32 });
  // Secrets reach the services as 0600 files, never in their environment.
  const secretFile = (name: string) => join(dataDir, name);
  const runners = Array.from({ length: args.runners }, (_, i) => ({ poolId: "default", runnerId: `local-${String(i + 1)}` }));
  const users = [...Object.values(ControlPlaneUsers), ObserverUser, ...runners.map((r) => runnerUser(r.poolId, r.runnerId))];
  const creds = upCredentials(dataDir, users);
  const natsConfig = natsAuthConfig({ runners, passwords: creds.passwords });
  const passthrough = passthroughEnv(process.env);
  // Learned at the first start; a restart listens on the same ports, so clients and printed URLs stay valid.
  let natsPort = args.natsPort >= 0 ? args.natsPort : undefined;
  let httpPort = args.httpPort;
  const natsUrl = () => `nats://127.0.0.1:${String(natsPort)}`;
  const gatewayUrl = () => `http://127.0.0.1:${String(httpPort)}`;

  const nats: Unit = {
    name: "nats-server",
    tier: 0,
    start: async (spawned) => {
      const handle = await startNatsServer({
        storeDir: join(dataDir, "nats"),
        extraConfig: natsConfig,
        ...(natsPort !== undefined ? { port: natsPort } : {}),
        onSpawn: (child) => spawned(childProc(child)),
      });
      natsPort = handle.port;
      // Once it exits, remove its config dir; the store stays for the restart.
      handle.process.once("exit", () => void handle.stop({ keepStore: true }));
      await provisionStorage(handle.url, creds.passwords[ControlPlaneUsers.provisioner] ?? "");
    },
  };
  const service = (name: ServiceName, unitName: string, user: string, env: () => Record<string, string>): Unit => {
    const logTo = createWriteStream(join(dataDir, "logs", `${unitName}.log`), { flags: "a", mode: 0o600 });
    return {
      name: unitName,
      tier: 1,
      start: async (spawned) => {
        const credsFile = creds.files[user] ?? "";
        const svcEnv = { ...passthrough, PADDOCK_NATS_URL: natsUrl(), PADDOCK_OPS_PORT: "0", ...env(), PADDOCK_NATS_CREDS_FILE: credsFile };
        const svc = await startService(name, svcEnv, { logTo, onSpawn: (child) => spawned(childProc(child)) });
        if (name === "gateway") httpPort = Number(svc.ready.httpPort);
      },
    };
  };
  const units = [
    nats,
    service("scheduler", "scheduler", ControlPlaneUsers.scheduler, () => ({ PADDOCK_SESSION_TOKEN_SECRET_FILE: secretFile("session-token-secret") })),
    service("event-recorder", "event-recorder", ControlPlaneUsers.recorder, () => ({ PADDOCK_SECRETS_KEY_FILE: secretFile("secrets-key") })),
    service("gateway", "gateway", ControlPlaneUsers.gateway, () => ({
      PADDOCK_HTTP_PORT: String(httpPort),
      ...upPreviewOrigin(httpPort, passthrough),
      PADDOCK_DEV_TOKEN_FILE: secretFile("dev-token"),
      PADDOCK_SECRETS_KEY_FILE: secretFile("secrets-key"),
    })),
    ...runners.map((r) =>
      service("runner-agent", `runner-${r.runnerId}`, runnerUser(r.poolId, r.runnerId), () => ({
        PADDOCK_GATEWAY_URL: gatewayUrl(),
        PADDOCK_RUNNER_ID: r.runnerId,
        PADDOCK_POOL_ID: r.poolId,
        PADDOCK_RUNNER_CAPACITY: String(args.capacity),
        PADDOCK_RUNNER_DATA_DIR: join(dataDir, `runner-${r.runnerId}`),
        PADDOCK_SECRETS_KEY_FILE: secretFile("secrets-key"),
      })),
    ),
  ];
  const supervisor = new Supervisor(units, { log, stopGraceMs: args.stopGraceMs });

  let stopping = false;
  const onSignal = () => {
    if (stopping) return;
    stopping = true;
    log("stopping paddock...");
    supervisor.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        log(`stop failed: ${String(err)}`);
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  try {
    await supervisor.start();
  } catch (err) {
    if (stopping) return;
    log(`start failed: ${err instanceof Error ? err.message : String(err)}`);
    await supervisor.stop();
    process.exit(1);
  }
  if (stopping) return;
  process.stdout.write(`PADDOCK_URL=${gatewayUrl()}\n`);
  process.stdout.write(`PADDOCK_TOKEN=${token}\n`);
  process.stdout.write(`PADDOCK_NATS_URL=${natsUrl()}\n`);
  process.stdout.write(`PADDOCK_OBSERVER_CREDS=${creds.files[ObserverUser] ?? ""}\n`);
  log(`paddock is up; logs in ${join(dataDir, "logs")}; a process that exits is restarted; Ctrl-C stops it all`);
}

void main();
