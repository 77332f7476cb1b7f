import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "@paddock/logging";

export interface BusConnectOptions {
  /** Comma-separated NATS URLs. */
  servers: string;
  /** Connection name shown by the server (service and instance). */
  name: string;
  user?: string | undefined;
  pass?: string | undefined;
}

/** Connects with unlimited reconnects: a service outlives broker restarts. Status changes are logged. */
export async function connectBus(opts: BusConnectOptions, log?: Logger): Promise<NatsConnection> {
  const nc = await connect({
    servers: opts.servers.split(",").map((s) => s.trim()),
    name: opts.name,
    ...(opts.user ? { user: opts.user, pass: opts.pass ?? "" } : {}),
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    waitOnFirstConnect: true,
  });
  if (log) {
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect" || s.type === "reconnect") log.warn({ nats: s.type, server: s.server }, `nats ${s.type}`);
      }
    })();
  }
  return nc;
}
