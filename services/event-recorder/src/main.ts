import { Registry } from "prom-client";
import { connectBus, createBusMetrics, provision, setOutgoingValidation } from "@paddock/bus";
import { createLogger } from "@paddock/logging";
import { runMain, startOpsServer } from "@paddock/service";
import { loadConfig } from "./config.ts";
import { createRecorder } from "./recorder.ts";

const config = loadConfig(process.env);
setOutgoingValidation(config.validateOutgoing);
const log = createLogger({ service: "event-recorder", level: config.logLevel });

runMain(log, async () => {
  const nc = await connectBus({ servers: config.natsUrl, name: "event-recorder", user: config.natsUser, pass: config.natsPass }, log);
  await provision(nc, { replicas: config.replicas, auditMaxAgeMs: config.auditMaxAgeMs });
  const registry = new Registry();
  const recorder = await createRecorder({ nc, log, bus: createBusMetrics(registry), registry });
  const ops = await startOpsServer({ host: config.opsHost, port: config.opsPort, registry, isReady: () => !nc.isClosed(), lagAlarm: { log, lagWarnMs: config.eventLoopLagWarnMs } });
  return {
    settle: () => nc.flush(),
    readyInfo: { opsPort: ops.port },
    stop: async () => {
      await recorder.stop();
      await ops.close();
      await nc.drain();
    },
  };
});
