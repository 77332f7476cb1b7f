import { defineService } from "@paddock/service";
import { loadConfig } from "./config.ts";
import { createRecorderMetrics } from "./metrics.ts";
import { createRecorder } from "./recorder.ts";
import { WebhookDispatcher } from "./webhooks/dispatcher.ts";

/** The event recorder as a service definition (run by main.ts through runService): the audit trail, and webhooks' deliveries. */
export const eventRecorderService = defineService({
  name: "event-recorder",
  loadConfig,
  provision: (config) => ({ replicas: config.replicas, auditMaxAgeMs: config.auditMaxAgeMs }),
  create: ({ nc, log, registry, config }) => {
    const metrics = createRecorderMetrics(registry);
    const recorder = createRecorder({ nc, log, metrics });
    const webhooks = new WebhookDispatcher({ nc, log: log.child({ component: "webhooks" }), now: Date.now, settings: config.webhooks, attempts: metrics.webhookAttempts });
    return {
      start: async () => {
        await recorder.start();
        await webhooks.start();
        return undefined;
      },
      stop: async () => {
        await webhooks.stop();
        await recorder.stop();
      },
    };
  },
});
