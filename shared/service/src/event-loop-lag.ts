import { monitorEventLoopDelay } from "node:perf_hooks";
import { Counter, Gauge, type Registry } from "prom-client";
import type { Logger } from "@paddock/logging";

export interface LagWatchOptions {
  registry: Registry;
  log: Logger;
  /** A window whose longest delay passes this logs a warning (and counts an alarm). */
  warnMs: number;
  /** Length of a window: the gauge shows the longest delay of the last one. */
  windowMs?: number;
}

export interface LagWatch {
  stop(): void;
}

const DEFAULT_WINDOW_MS = 5_000;
const NS_PER_MS = 1e6;

/**
 * Watches the event loop's delay (perf_hooks): `paddock_event_loop_lag_max_seconds`
 * and `_p99_seconds` show the last window, and a window past `warnMs` logs a
 * warning and counts `paddock_event_loop_lag_alarms_total`. A blocked loop
 * stops everything a service does at once (a runner's lease renewal, every
 * terminal), so it is worth its own alarm.
 */
export function watchEventLoopLag(opts: LagWatchOptions): LagWatch {
  const registers = [opts.registry];
  const max = new Gauge({ name: "paddock_event_loop_lag_max_seconds", help: "Longest event-loop delay in the last window", registers });
  const p99 = new Gauge({ name: "paddock_event_loop_lag_p99_seconds", help: "99th percentile event-loop delay in the last window", registers });
  const alarms = new Counter({ name: "paddock_event_loop_lag_alarms_total", help: "Windows whose longest event-loop delay passed the warning threshold", registers });
  const histogram = monitorEventLoopDelay({ resolution: 10 });
  histogram.enable();
  const timer = setInterval(() => {
    const maxMs = histogram.max / NS_PER_MS;
    const p99Ms = histogram.percentile(99) / NS_PER_MS;
    histogram.reset();
    max.set(maxMs / 1000);
    p99.set(p99Ms / 1000);
    if (maxMs > opts.warnMs) {
      alarms.inc();
      opts.log.warn({ lagMs: Math.round(maxMs), p99Ms: Math.round(p99Ms), thresholdMs: opts.warnMs }, "event loop lagged");
    }
  }, opts.windowMs ?? DEFAULT_WINDOW_MS);
  timer.unref();
  return {
    stop: () => {
      clearInterval(timer);
      histogram.disable();
    },
  };
}
