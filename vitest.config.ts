import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["shared/*/src/**/*.test.ts", "services/*/src/**/*.test.ts", "cli/src/**/*.test.ts", "console/src/**/*.test.ts", "sdk/src/**/*.test.ts", "integrations/*/src/**/*.test.ts", "test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Each file starts its own nats-server and services; two at a time fits 2 cores.
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
  },
});
