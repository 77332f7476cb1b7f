import { beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { Registry } from "prom-client";
import { Streams } from "@paddock/contracts";
import { createBusMetrics, provision } from "@paddock/bus";
import { silentLogger } from "@paddock/logging";
import { useNatsServer } from "@paddock/testing/vitest";
import { loadConfig } from "./config.ts";
import { createSchedulerMetrics } from "./metrics.ts";
import { RUNNER_FACTS_CONSUMER } from "./state/fact-backlog.ts";
import { createScheduler } from "./scheduler.ts";

describe("createScheduler", () => {
  const nats = useNatsServer();
  beforeAll(() => provision(nats.nc, { replicas: 1 }));

  it("touches nothing on the bus until start(); start() consumes runner facts and stop() ends it", async () => {
    const factConsumers = async () => (await (await jetstreamManager(nats.nc)).consumers.list(Streams.runner).next()).map((c) => c.name);
    const registry = new Registry();
    let id = 0;
    const created = createScheduler({
      nc: nats.nc,
      config: loadConfig({ PADDOCK_SCHEDULER_TICK_MS: "3600000" }),
      log: silentLogger(),
      bus: createBusMetrics(registry),
      metrics: createSchedulerMetrics(registry),
      registry,
      now: () => 1_000,
      newId: (prefix) => `${prefix}_${String((id += 1))}`,
    });
    await nats.nc.flush();
    expect(await factConsumers()).toEqual([]);
    const scheduler = await created.start();
    expect(await factConsumers()).toEqual([RUNNER_FACTS_CONSUMER]);
    await scheduler.stop();
  });
});
