import { Registry } from "prom-client";
import { connectBus, provision, type BusConnectOptions, type ProvisionOptions } from "@paddock/bus";
import type { commonConfig } from "@paddock/config";
import { createLogger, type Logger } from "@paddock/logging";
import { startOpsServer } from "./ops.ts";
import { runMain } from "./run-main.ts";

type Bus = Awaited<ReturnType<typeof connectBus>>;

/** The settings every service's config carries: what `commonConfig` of @paddock/config makes of `commonEnv`. */
export type CommonServiceConfig = ReturnType<typeof commonConfig>;

/** What runService hands a service: everything it may touch, so creating it has no side effects. */
export interface ServiceDeps<C> {
  nc: Bus;
  config: C;
  log: Logger;
  /** The one registry of this process: every metric the service has, and /metrics. */
  registry: Registry;
  /** How nc was connected: for a thread of the service that needs a connection of its own. */
  bus: BusConnectOptions;
}

/** A created, not yet started service. */
export interface ServiceInstance {
  /** Starts serving; resolves with the fields of the "ready" log line (ports, ids). */
  start(): Promise<Record<string, unknown> | undefined>;
  stop(): Promise<void>;
  /** /readyz; defaults to "the bus connection is open". */
  isReady?: () => boolean;
}

export interface ServiceDefinition<C extends CommonServiceConfig> {
  /** Logged as `service`; the NATS connection name unless connectionName says otherwise. */
  name: string;
  /** Parses the environment with the service's zod schema (once, at start). */
  loadConfig(env: Record<string, string | undefined>): C;
  connectionName?: (config: C) => string;
  /** The streams and buckets this service makes sure exist before it starts. */
  provision: (config: C) => ProvisionOptions;
  create(deps: ServiceDeps<C>): ServiceInstance;
}

/** Names a service definition (typed, so `create` sees the service's own config). */
export function defineService<C extends CommonServiceConfig>(definition: ServiceDefinition<C>): ServiceDefinition<C> {
  return definition;
}

/**
 * The one main of every service: load its config, connect the bus, provision,
 * create and start it, serve /healthz, /readyz and /metrics from its registry,
 * log "ready" after a bus round trip, and drain on SIGTERM or SIGINT (runMain).
 */
export function runService<C extends CommonServiceConfig>(definition: ServiceDefinition<C>, env: Record<string, string | undefined>): void {
  const config = definition.loadConfig(env);
  const log = createLogger({ service: definition.name, level: config.logLevel });
  runMain(log, async () => {
    const bus: BusConnectOptions = {
      servers: config.natsUrl,
      name: definition.connectionName?.(config) ?? definition.name,
      user: config.natsUser,
      pass: config.natsPass,
      nkeySeed: config.natsNkeySeed,
      validateOutgoing: config.validateOutgoing,
    };
    const nc = await connectBus(bus, log);
    await provision(nc, definition.provision(config));
    const registry = new Registry();
    const svc = definition.create({ nc, config, log, registry, bus });
    const readyInfo = await svc.start();
    const isReady = svc.isReady ?? (() => !nc.isClosed());
    const ops = await startOpsServer({ host: config.opsHost, port: config.opsPort, registry, isReady, lagAlarm: { log, lagWarnMs: config.eventLoopLagWarnMs } });
    return {
      // A subscription made during start is only queued on the client: a bus round trip before "ready".
      settle: () => nc.flush(),
      readyInfo: { ...readyInfo, opsPort: ops.port },
      stop: async () => {
        await svc.stop();
        await ops.close();
        await nc.drain();
      },
    };
  });
}
