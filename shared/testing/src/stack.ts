import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { startNatsServer, type NatsServerHandle } from "./nats-server.ts";
import { startService, type ServiceProcess } from "./process.ts";

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
  /** Starts one more runner-agent process on this stack. */
  addRunner(opts?: { runnerId?: string; poolId?: string; capacity?: number }): Promise<ServiceProcess>;
  stop(): Promise<void>;
}

export interface StackOptions {
  runners?: number;
  runnerCapacity?: number;
  /** Extra env per service name. */
  env?: Partial<Record<"scheduler" | "event-recorder" | "gateway" | "runner-agent", Record<string, string>>>;
}

/**
 * Brings up the whole system as separate OS processes against a fresh
 * nats-server: scheduler, event-recorder, gateway and N runner-agents.
 */
export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  const nats = await startNatsServer();
  const dataDir = mkdtempSync(join(tmpdir(), "paddock-stack-"));
  const token = `pdk_dev_${randomBytes(18).toString("hex")}`;
  const commonEnv = { PADDOCK_NATS_URL: nats.url, PADDOCK_LOG_LEVEL: "info", PADDOCK_OPS_PORT: "0" };
  const started: ServiceProcess[] = [];
  const start = async (name: "scheduler" | "event-recorder" | "gateway" | "runner-agent", env: Record<string, string>) => {
    const svc = await startService(name, { ...commonEnv, ...opts.env?.[name], ...env });
    started.push(svc);
    return svc;
  };
  let runnerCount = 0;
  let gatewayUrl = "";
  const addRunner = async (r: { runnerId?: string; poolId?: string; capacity?: number } = {}) => {
    runnerCount += 1;
    const runnerId = r.runnerId ?? `runner-${runnerCount}`;
    return start("runner-agent", {
      PADDOCK_GATEWAY_URL: gatewayUrl,
      PADDOCK_RUNNER_ID: runnerId,
      PADDOCK_POOL_ID: r.poolId ?? "default",
      PADDOCK_RUNNER_CAPACITY: String(r.capacity ?? opts.runnerCapacity ?? 8),
      PADDOCK_RUNNER_DATA_DIR: join(dataDir, runnerId),
    });
  };
  try {
    const scheduler = await start("scheduler", { PADDOCK_SESSION_TOKEN_SECRET: randomBytes(24).toString("hex") });
    const recorder = await start("event-recorder", {});
    const gateway = await start("gateway", { PADDOCK_HTTP_PORT: "0", PADDOCK_DEV_TOKEN: token });
    gatewayUrl = `http://127.0.0.1:${String(gateway.ready.httpPort)}`;
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
      addRunner,
      stop: async () => {
        await Promise.all(started.map((s) => s.stop()));
        await nats.stop();
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await Promise.all(started.map((s) => s.kill()));
    await nats.stop();
    throw err;
  }
}
