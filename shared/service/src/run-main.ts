import type { Logger } from "@paddock/logging";

export interface Stoppable {
  stop(): Promise<void>;
}

export interface Started extends Stoppable {
  /** Logged with "ready" (ports, ids). */
  readyInfo?: Record<string, unknown>;
  /**
   * Awaited before "ready" is logged. A NATS subscription made during start
   * is only queued on the client (commands are flushed once per event-loop
   * turn), so a caller acting on "ready" could otherwise find no responders:
   * services pass a bus round trip (`nc.flush()`).
   */
  settle?: () => Promise<void>;
}

/**
 * Runs a service's main: start it, log "ready" with whatever the start
 * returned (ports), and on SIGTERM or SIGINT stop it (drain NATS) and exit.
 * A start failure exits non-zero with the reason logged.
 */
export function runMain(log: Logger, start: () => Promise<Started>): void {
  let stopping = false;
  const started = async () => {
    const svc = await start();
    await svc.settle?.();
    return svc;
  };
  started().then(
    (svc) => {
      log.info({ ...svc.readyInfo }, "ready");
      const shutdown = (signal: string) => {
        if (stopping) return;
        stopping = true;
        log.info({ signal }, "stopping");
        svc.stop().then(
          () => {
            log.info("stopped");
            process.exit(0);
          },
          (err: unknown) => {
            log.error({ err }, "stop failed");
            process.exit(1);
          },
        );
      };
      process.on("SIGTERM", () => shutdown("SIGTERM"));
      process.on("SIGINT", () => shutdown("SIGINT"));
    },
    (err: unknown) => {
      log.fatal({ err }, "start failed");
      process.exit(1);
    },
  );
}
