import { randomUUID } from "node:crypto";
import { defineService } from "@paddock/service";
import { seedDevToken } from "./auth/auth.ts";
import { loadConfig } from "./config.ts";
import { createGateway } from "./gateway.ts";
import { createGatewayMetrics } from "./metrics.ts";

/** The gateway as a service definition (run by main.ts through runService). */
export const gatewayService = defineService({
  name: "gateway",
  loadConfig,
  connectionName: () => `gateway-${process.pid}`,
  provision: (config) => ({ replicas: config.replicas }),
  create: ({ nc, config, log, registry }) => {
    const gateway = createGateway({ nc, config, log, metrics: createGatewayMetrics(registry), now: Date.now, newId: randomUUID });
    return {
      start: async () => {
        if (config.devToken) {
          await seedDevToken(nc, { token: config.devToken, workspaceId: config.devWorkspace, actorId: config.devActor, now: Date.now() });
          log.info({ workspaceId: config.devWorkspace, actorId: config.devActor }, "dev token seeded");
        }
        const { port: httpPort } = await gateway.listen();
        return { httpPort };
      },
      stop: () => gateway.close(),
      isReady: gateway.isReady,
    };
  },
});
