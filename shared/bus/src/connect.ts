import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "@paddock/logging";
import { natsConnectOptions, type BusConnectOptions } from "./nats-options.ts";
import { setBusEncoder } from "./outgoing.ts";

export type { BusConnectOptions };

/**
 * Connects with unlimited reconnects: a service outlives broker restarts.
 * Status changes are logged. Messages sent through encoderOf(connection) are
 * checked as `validateOutgoing` says.
 */
export async function connectBus(opts: BusConnectOptions, log?: Logger): Promise<NatsConnection> {
  const nc = await connect(natsConnectOptions(opts));
  setBusEncoder(nc, opts.validateOutgoing);
  if (log) {
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect" || s.type === "reconnect") log.warn({ nats: s.type, server: s.server }, `nats ${s.type}`);
      }
    })();
  }
  return nc;
}
