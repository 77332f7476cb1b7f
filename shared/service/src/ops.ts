import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { collectDefaultMetrics, type Registry } from "prom-client";
import type { Logger } from "@paddock/logging";
import { watchEventLoopLag } from "./event-loop-lag.ts";

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
