import { randomUUID } from "node:crypto";
import { connectBus, provision, setOutgoingValidation } from "@paddock/bus";
import { createLogger } from "@paddock/logging";
import { runMain, startOpsServer } from "@paddock/service";
import { seedDevToken } from "./auth.ts";
import { loadConfig } from "./config.ts";
import { createGateway } from "./gateway.ts";
import { createGatewayMetrics } from "./metrics.ts";

const config = loadConfig(process.env);
setOutgoingValidation(config.validateOutgoing === true);
const log = createLogger({ service: "gateway", level: config.logLevel });

runMain(log, async () => {
  const nc = await connectBus({ servers: config.natsUrl, name: `gateway-${process.pid}`, user: config.natsUser, pass: config.natsPass }, log);
  await provision(nc, { replicas: config.replicas });
  if (config.devToken) {
    await seedDevToken(nc, { token: config.devToken, workspaceId: config.devWorkspace, actorId: config.devActor, now: Date.now() });
    log.info({ workspaceId: config.devWorkspace, actorId: config.devActor }, "dev token seeded");
  }
  const metrics = createGatewayMetrics();
  const gateway = createGateway({ nc, config, log, metrics, now: Date.now, newId: randomUUID });
  const { port: httpPort } = await gateway.listen();
  const ops = await startOpsServer({ host: config.opsHost, port: config.opsPort, registry: metrics.registry, isReady: gateway.isReady, lagAlarm: { log, lagWarnMs: config.eventLoopLagWarnMs } });
  return {
    settle: () => nc.flush(),
    readyInfo: { httpPort, opsPort: ops.port },
    stop: async () => {
      await gateway.close();
      await ops.close();
      await nc.drain();
    },
  };
});
