// `@paddock/testing/vitest`: apart from the index, since vitest cannot be imported outside a test run (bench, chaos).
import { afterAll, beforeAll } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { lateBound } from "./late-bound.ts";
import { startNatsServer, type NatsServerHandle, type NatsServerOptions } from "./nats-server.ts";

/** A test file's nats-server and its connection to it. */
export interface NatsFixture {
  server: NatsServerHandle;
  /** The server's URL (`server.url`). */
  url: string;
  /** A plain client connection (not connectBus: its outgoing messages are validated, see encoderOf). */
  nc: NatsConnection;
}

/**
 * The preamble of a test file that talks to a real nats-server: starts one (and
 * connects to it) before the file's tests, closes the connection and stops the
 * server after them. Call it at the top of the file or of a describe block; read
 * its fields inside tests and hooks.
 */
export function useNatsServer(opts: NatsServerOptions = {}): NatsFixture {
  let fixture: NatsFixture | undefined;
  beforeAll(async () => {
    const server = await startNatsServer(opts);
    try {
      fixture = { server, url: server.url, nc: await connect({ servers: server.url }) };
    } catch (err) {
      await server.stop();
      throw err;
    }
  });
  afterAll(async () => {
    if (!fixture) return;
    const { server, nc } = fixture;
    fixture = undefined;
    await nc.close();
    await server.stop();
  });
  return lateBound("the nats-server of useNatsServer", () => fixture);
}
