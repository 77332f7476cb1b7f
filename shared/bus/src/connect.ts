import { connect, type NatsConnection } from "@nats-io/transport-node";

export interface BusConnectOptions {
  /** Comma-separated NATS URLs. */
  servers: string;
  /** Connection name shown by the server (service and instance). */
  name: string;
  user?: string | undefined;
  pass?: string | undefined;
}

/** Connects with unlimited reconnects: a service outlives broker restarts. */
export async function connectBus(opts: BusConnectOptions): Promise<NatsConnection> {
  return connect({
    servers: opts.servers.split(",").map((s) => s.trim()),
    name: opts.name,
    ...(opts.user ? { user: opts.user, pass: opts.pass ?? "" } : {}),
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    waitOnFirstConnect: true,
  });
}
