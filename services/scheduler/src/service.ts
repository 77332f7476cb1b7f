import { createBusMetrics } from "@paddock/bus";
import { randomId } from "@paddock/contracts";
import { defineService } from "@paddock/service";
import { loadConfig } from "./config.ts";
import { createSchedulerMetrics } from "./metrics.ts";
import { createScheduler, type Scheduler } from "./scheduler.ts";

/** The scheduler as a service definition (run by main.ts through runService). */
export const schedulerService = defineService({
  name: "scheduler",
  loadConfig,
  // The scheduler owns TERM and SCREENS retention; runners may not change stream configs.
  provision: (config) => ({ replicas: config.replicas, termMaxMsgsPerSubject: config.termMaxMsgsPerApp, termMaxAgeMs: config.termMaxAgeMs, screensMaxBytes: config.screensMaxBytes }),
  create: ({ nc, config, log, registry }) => {
    const created = createScheduler({ nc, config, log, bus: createBusMetrics(registry), metrics: createSchedulerMetrics(registry), registry, now: Date.now, newId: randomId });
    let scheduler: Scheduler | undefined;
    return {
      start: async () => {
        scheduler = await created.start();
        return undefined;
      },
      stop: async () => {
        await scheduler?.stop();
      },
    };
  },
});
