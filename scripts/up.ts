// `npm run up`: the whole system on this machine — a local nats-server with
// JetStream, the four services and one runner — then prints how to reach it.
import { createWriteStream, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { join, resolve } from "node:path";
import { parseScriptArgsOrExit, startNatsServer, startService, type ServiceProcess } from "@paddock/testing";
import { parseUpArgs, UP_USAGE } from "./up-args.ts";

const { httpPort, natsPort, runners: runnerCount, capacity, dataDir: dataDirArg } = parseScriptArgsOrExit(UP_USAGE, parseUpArgs);
const dataDir = resolve(dataDirArg);
mkdirSync(join(dataDir, "logs"), { recursive: true });

/** A secret kept in the data dir, so restarts keep the dev token and sessions' tokens valid. */
function persistedSecret(name: string, prefix: string): string {
  const file = join(dataDir, name);
  if (existsSync(file)) return readFileSync(file, "utf8").trim();
  const secret = `${prefix}${randomBytes(24).toString("hex")}`;
  writeFileSync(file, secret + "\n", { mode: 0o600 });
  return secret;
}

async function main(): Promise<void> {
  const token = persistedSecret("dev-token", "pdk_dev_");
  const sessionTokenSecret = persistedSecret("session-token-secret", "");
  const nats = await startNatsServer({ storeDir: join(dataDir, "nats"), ...(natsPort >= 0 ? { port: natsPort } : {}) });
  const common = { PADDOCK_NATS_URL: nats.url, PADDOCK_OPS_PORT: "0" };
  const services: ServiceProcess[] = [];
  const start = async (name: string, env: Record<string, string>, logName = name) => {
    const logTo = createWriteStream(join(dataDir, "logs", `${logName}.log`), { flags: "a" });
    const svc = await startService(name, { ...common, ...env }, { logTo });
    services.push(svc);
    return svc;
  };
  const stopAll = async () => {
    for (const svc of [...services].reverse()) await svc.stop();
    await nats.stop({ keepStore: true });
  };
  let stopping = false;
  const onSignal = () => {
    if (stopping) return;
    stopping = true;
    process.stderr.write("stopping paddock...\n");
    stopAll().then(
      () => process.exit(0),
      (err: unknown) => {
        process.stderr.write(`stop failed: ${String(err)}\n`);
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  try {
    await start("scheduler", { PADDOCK_SESSION_TOKEN_SECRET: sessionTokenSecret });
    await start("event-recorder", {});
    const gateway = await start("gateway", { PADDOCK_HTTP_PORT: String(httpPort), PADDOCK_DEV_TOKEN: token });
    for (let i = 1; i <= runnerCount; i++) {
      await start(
        "runner-agent",
        {
          PADDOCK_GATEWAY_URL: `http://127.0.0.1:${String(gateway.ready.httpPort)}`,
          PADDOCK_RUNNER_ID: `local-${i}`,
          PADDOCK_POOL_ID: "default",
          PADDOCK_RUNNER_CAPACITY: String(capacity),
          PADDOCK_RUNNER_DATA_DIR: join(dataDir, `runner-local-${i}`),
        },
        `runner-local-${i}`,
      );
    }
    process.stdout.write(`PADDOCK_URL=http://127.0.0.1:${String(gateway.ready.httpPort)}\n`);
    process.stdout.write(`PADDOCK_TOKEN=${token}\n`);
    process.stdout.write(`PADDOCK_NATS_URL=${nats.url}\n`);
    process.stderr.write(`paddock is up; logs in ${join(dataDir, "logs")}; Ctrl-C stops it\n`);
    for (const svc of services) {
      void svc.exited.then((code) => {
        if (!stopping) {
          process.stderr.write(`${svc.name} exited (${code}); stopping everything\n`);
          onSignal();
        }
      });
    }
  } catch (err) {
    process.stderr.write(`start failed: ${err instanceof Error ? err.message : String(err)}\n`);
    await stopAll();
    process.exit(1);
  }
}

void main();
