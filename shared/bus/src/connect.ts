import { connect, nkeyAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { inboxPrefixOf } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { setBusEncoder } from "./outgoing.ts";

export interface BusConnectOptions {
  /** Comma-separated NATS URLs. */
  servers: string;
  /** Connection name shown by the server (service and instance). */
  name: string;
  user?: string | undefined;
  pass?: string | undefined;
  /**
   * An nkey seed (`SU...`): authenticate by signing the server's nonce
   * instead of a password (a joined runner, admitted by the auth callout;
   * docs/decisions/0061-runner-join.md). `user` then only names the inbox
   * prefix, the name the callout gives this connection.
   */
  nkeySeed?: string | undefined;
  /**
   * Check every message sent on this connection against its schema too
   * (receivers always check): a debugging aid, see encoderOf. From the
   * service's config; on in tests.
   */
  validateOutgoing: boolean;
}

/**
 * Connects with unlimited reconnects: a service outlives broker restarts.
 * Status changes are logged. Messages sent through encoderOf(connection) are
 * checked as `validateOutgoing` says.
 */
export async function connectBus(opts: BusConnectOptions, log?: Logger): Promise<NatsConnection> {
  const nc = await connect({
    servers: opts.servers.split(",").map((s) => s.trim()),
    name: opts.name,
    // With credentials, replies come under the user's own inbox prefix: its
    // permissions let it read nothing else, and responders can tell who asks.
    ...(opts.user && opts.nkeySeed === undefined ? { user: opts.user, pass: opts.pass ?? "", inboxPrefix: inboxPrefixOf(opts.user) } : {}),
    ...(opts.nkeySeed !== undefined ? { authenticator: nkeyAuthenticator(new TextEncoder().encode(opts.nkeySeed)), ...(opts.user ? { inboxPrefix: inboxPrefixOf(opts.user) } : {}) } : {}),
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    waitOnFirstConnect: true,
    // Every request otherwise allocates two Errors (with stack traces) up front
    // just in case it fails: measurable CPU on a control plane that makes
    // thousands of KV and JetStream requests a second.
    noAsyncTraces: true,
  });
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
