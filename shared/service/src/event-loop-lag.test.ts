import { describe, expect, it } from "vitest";
import { Registry } from "prom-client";
import type { Logger } from "@paddock/logging";
import { watchEventLoopLag } from "./event-loop-lag.ts";

describe("watchEventLoopLag", () => {
  it("a window with the loop held past the threshold logs a warning with the lag, counts an alarm and shows it on the gauge", async () => {
    const registry = new Registry();
    let warned!: (fields: { lagMs: number; thresholdMs: number }) => void;
    const warning = new Promise<{ lagMs: number; thresholdMs: number }>((resolve) => (warned = resolve));
    const log = { warn: (fields: { lagMs: number; thresholdMs: number }) => warned(fields) } as unknown as Logger;
    const watch = watchEventLoopLag({ registry, log, warnMs: 50, windowMs: 20 });
    try {
      // Hold the loop well past the threshold, as a blocking write on a PTY master did, until a
      // window reports it (the sampler and the window timer may both fire after one hold, in either order).
      let fields: { lagMs: number; thresholdMs: number } | undefined;
      void warning.then((f) => (fields = f));
      while (fields === undefined) {
        const until = performance.now() + 200;
        while (performance.now() < until) {
          // busy
        }
        await new Promise((resolve) => setTimeout(resolve, 30));
      }
      expect(fields.thresholdMs).toBe(50);
      expect(fields.lagMs).toBeGreaterThan(50);
      const text = await registry.metrics();
      expect(text).toMatch(/paddock_event_loop_lag_alarms_total [1-9]/);
      expect(text).toContain("paddock_event_loop_lag_max_seconds");
    } finally {
      watch.stop();
    }
  });
});
