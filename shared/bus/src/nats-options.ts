import { nkeyAuthenticator, type ConnectionOptions } from "@nats-io/transport-node";
import { inboxPrefixOf } from "@paddock/contracts/names";

/**
 * How a service connects. Imports nothing but the NATS client and the name
 * builders, so a worker thread that needs a connection of its own (the
 * runner's restore worker) loads no schema.
 */
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
  /** Keep trying until the first connection is made (default); false: fail after the client's connect timeout. */
  waitOnFirstConnect?: boolean;
}

/** The client's options for opts: unlimited reconnects (a service outlives broker restarts). */
export function natsConnectOptions(opts: BusConnectOptions): ConnectionOptions {
  return {
    servers: opts.servers.split(",").map((s) => s.trim()),
    name: opts.name,
    // With credentials, replies come under the user's own inbox prefix: its
    // permissions let it read nothing else, and responders can tell who asks.
    ...(opts.user && opts.nkeySeed === undefined ? { user: opts.user, pass: opts.pass ?? "", inboxPrefix: inboxPrefixOf(opts.user) } : {}),
    ...(opts.nkeySeed !== undefined ? { authenticator: nkeyAuthenticator(new TextEncoder().encode(opts.nkeySeed)), ...(opts.user ? { inboxPrefix: inboxPrefixOf(opts.user) } : {}) } : {}),
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    waitOnFirstConnect: opts.waitOnFirstConnect ?? true,
    // Every request otherwise allocates two Errors (with stack traces) up front
    // just in case it fails: measurable CPU on a control plane that makes
    // thousands of KV and JetStream requests a second.
    noAsyncTraces: true,
  };
}
