/**
 * Watch mode wiring for a session placement: a WatchReloader on its workspace
 * (watch-reload.ts: debounce, rate limit, ignore rules) whose reloads run as
 * session commands, a failed one logged.
 */
import type { SessionRuntimeDeps } from "./session-deps.ts";
import { WatchReloader } from "./watch-reload.ts";

/** Reloads through reload (a session command) on every workspace change. */
export function watchSessionWorkspace(deps: SessionRuntimeDeps, workspace: string, logFields: Record<string, unknown>, reload: () => Promise<void>): WatchReloader {
  return new WatchReloader({
    workspace,
    settings: deps.watch,
    now: deps.now,
    metrics: deps.metrics,
    reload: () => reload().catch((err: unknown) => deps.log.warn({ err, ...logFields }, "watch reload failed")),
  });
}
