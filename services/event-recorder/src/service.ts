import { createBusMetrics } from "@paddock/bus";
import { defineService } from "@paddock/service";
import { loadConfig } from "./config.ts";
import { createRecorder } from "./recorder.ts";

/** The event recorder as a service definition (run by main.ts through runService). */
export const eventRecorderService = defineService({
  name: "event-recorder",
  loadConfig,
  provision: (config) => ({ replicas: config.replicas, auditMaxAgeMs: config.auditMaxAgeMs }),
  create: ({ nc, log, registry }) => {
    let recorder: Awaited<ReturnType<typeof createRecorder>> | undefined;
    return {
      start: async () => {
        recorder = await createRecorder({ nc, log, bus: createBusMetrics(registry), registry });
        return undefined;
      },
      stop: async () => {
        await recorder?.stop();
      },
    };
  },
});
