import { randomUUID } from "node:crypto";
import { connectBus, provision, setOutgoingValidation } from "@paddock/bus";
import { createLogger } from "@paddock/logging";
import { runMain, startOpsServer } from "@paddock/service";
import { createRunnerAgent } from "./agent.ts";
import { loadConfig } from "./config.ts";
import { createRunnerMetrics } from "./metrics.ts";
import { RpcSecretResolver } from "./secrets.ts";

const config = loadConfig(process.env);
setOutgoingValidation(config.validateOutgoing === true);
const log = createLogger({ service: "runner-agent", level: config.logLevel });

runMain(log, async () => {
  const nc = await connectBus({ servers: config.natsUrl, name: `runner-agent-${config.runnerId}`, user: config.natsUser, pass: config.natsPass }, log);
  await provision(nc, { replicas: config.replicas, runner: { poolId: config.poolId, runnerId: config.runnerId } });
  const metrics = createRunnerMetrics();
  const agent = createRunnerAgent({ nc, config, log, metrics, now: Date.now, newId: randomUUID, secrets: new RpcSecretResolver(nc, config.secretsKey, { poolId: config.poolId, runnerId: config.runnerId }) });
  const { generation } = await agent.start();
  const ops = await startOpsServer({ host: config.opsHost, port: config.opsPort, registry: metrics.registry, isReady: agent.isReady, lagAlarm: { log, lagWarnMs: config.eventLoopLagWarnMs } });
  return {
    settle: () => nc.flush(),
    readyInfo: { runnerId: config.runnerId, poolId: config.poolId, generation, opsPort: ops.port },
    stop: async () => {
      await agent.stop();
      await nc.drain();
      await ops.close();
    },
  };
});
