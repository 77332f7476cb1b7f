import { Registry } from "prom-client";
import { randomId } from "@paddock/contracts";
import { connectBus, createBusMetrics, provision, setOutgoingValidation } from "@paddock/bus";
import { createLogger } from "@paddock/logging";
import { runMain, startOpsServer } from "@paddock/service";
import { loadConfig } from "./config.ts";
import { createSchedulerMetrics } from "./context.ts";
import { createScheduler } from "./scheduler.ts";

const config = loadConfig(process.env);
setOutgoingValidation(config.validateOutgoing);
const log = createLogger({ service: "scheduler", level: config.logLevel });

runMain(log, async () => {
  const nc = await connectBus({ servers: config.natsUrl, name: "scheduler", user: config.natsUser, pass: config.natsPass }, log);
  await provision(nc, { replicas: config.replicas, termMaxMsgsPerSubject: config.termMaxMsgsPerApp, termMaxAgeMs: config.termMaxAgeMs, screensMaxBytes: config.screensMaxBytes });
  const registry = new Registry();
  const scheduler = await createScheduler({
    nc,
    config,
    log,
    bus: createBusMetrics(registry),
    metrics: createSchedulerMetrics(registry),
    registry,
    now: Date.now,
    newId: randomId,
  });
  const ops = await startOpsServer({ host: config.opsHost, port: config.opsPort, registry, isReady: () => !nc.isClosed(), lagAlarm: { log, lagWarnMs: config.eventLoopLagWarnMs } });
  return {
    settle: () => nc.flush(),
    readyInfo: { opsPort: ops.port },
    stop: async () => {
      await scheduler.stop();
      await ops.close();
      await nc.drain();
    },
  };
});
