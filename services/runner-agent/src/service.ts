import { randomUUID } from "node:crypto";
import { defineService } from "@paddock/service";
import { createRunnerAgent } from "./agent.ts";
import { loadConfig } from "./config.ts";
import { createRunnerMetrics } from "./metrics.ts";
import { RpcSecretResolver } from "./sessions/secrets.ts";

/** The runner agent as a service definition (run by main.ts through runService). */
export const runnerAgentService = defineService({
  name: "runner-agent",
  loadConfig,
  connectionName: (config) => `runner-agent-${config.runnerId}`,
  provision: (config) => ({ replicas: config.replicas, runner: { poolId: config.poolId, runnerId: config.runnerId } }),
  create: ({ nc, config, log, registry, bus }) => {
    const secrets = new RpcSecretResolver(nc, config.secretsKey, { poolId: config.poolId, runnerId: config.runnerId });
    const agent = createRunnerAgent({ nc, config, log, metrics: createRunnerMetrics(registry), now: Date.now, newId: randomUUID, secrets, bus });
    return {
      start: async () => {
        const { generation } = await agent.start();
        return { runnerId: config.runnerId, poolId: config.poolId, generation };
      },
      stop: () => agent.stop(),
      isReady: agent.isReady,
    };
  },
});
