import type { Duplex } from "node:stream";
import { PortUnreachableError } from "@paddock/contracts";
import { InitPortConnection } from "../port-connection.ts";
import type { ExecHolder } from "./exec-holder.ts";

/** A port on the session's loopback, connected to by its exec init from inside its network namespace. */
export async function connectThroughInit(holder: ExecHolder, port: number): Promise<Duplex> {
  const conn = new InitPortConnection();
  const held = holder.connect(port, (bytes) => conn.feed(bytes), () => conn.feed(null));
  if (!(await held.connected)) {
    conn.destroy();
    throw new PortUnreachableError(`nothing listens on port ${port} in the session`);
  }
  conn.attach(held.process);
  return conn;
}
