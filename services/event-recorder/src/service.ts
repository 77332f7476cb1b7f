import { defineService } from "@paddock/service";
import { loadConfig } from "./config.ts";
import { createRecorderMetrics } from "./metrics.ts";
import { createRecorder } from "./recorder.ts";

/** The event recorder as a service definition (run by main.ts through runService). */
export const eventRecorderService = defineService({
  name: "event-recorder",
  loadConfig,
  provision: (config) => ({ replicas: config.replicas, auditMaxAgeMs: config.auditMaxAgeMs }),
  create: ({ nc, log, registry }) => {
    const recorder = createRecorder({ nc, log, metrics: createRecorderMetrics(registry) });
    return {
      start: async () => {
        await recorder.start();
        return undefined;
      },
      stop: () => recorder.stop(),
    };
  },
});
