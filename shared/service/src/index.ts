import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { collectDefaultMetrics, type Registry } from "prom-client";
import type { Logger } from "@paddock/logging";
import { watchEventLoopLag } from "./event-loop-lag.ts";

export { watchEventLoopLag, type LagWatch, type LagWatchOptions } from "./event-loop-lag.ts";

export interface OpsServer {
  /** The bound port (useful when 0 was asked for). */
  port: number;
  close(): Promise<void>;
}

export interface OpsOptions {
  host: string;
  port: number;
  registry: Registry;
  /** Readiness: connected to NATS and serving. */
  isReady: () => boolean;
  /** With a logger, the event loop's delay is watched and a window past `lagWarnMs` logs a warning (watchEventLoopLag). */
  lagAlarm?: { log: Logger; lagWarnMs: number };
}

/** Serves /healthz (process alive), /readyz (ready to serve) and /metrics. */
export async function startOpsServer(opts: OpsOptions): Promise<OpsServer> {
  collectDefaultMetrics({ register: opts.registry });
  const lag = opts.lagAlarm ? watchEventLoopLag({ registry: opts.registry, log: opts.lagAlarm.log, warnMs: opts.lagAlarm.lagWarnMs }) : undefined;
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (path === "/healthz") {
      res.writeHead(200, { "content-type": "application/json" }).end('{"status":"ok"}');
    } else if (path === "/readyz") {
      const ready = opts.isReady();
      res.writeHead(ready ? 200 : 503, { "content-type": "application/json" });
      res.end(JSON.stringify({ status: ready ? "ready" : "not_ready" }));
    } else if (path === "/metrics") {
      opts.registry.metrics().then(
        (text) => res.writeHead(200, { "content-type": opts.registry.contentType }).end(text),
        () => res.writeHead(500).end(),
      );
    } else {
      res.writeHead(404, { "content-type": "application/json" });
      res.end('{"error":{"code":"not_found","message":"no such endpoint"}}');
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.host, resolve);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () => {
      lag?.stop();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

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
