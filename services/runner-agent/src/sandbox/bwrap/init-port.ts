import type { Duplex } from "node:stream";
import { PortUnreachableError } from "@paddock/contracts";
import { connectTcp, InitPortConnection } from "../port-connection.ts";
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

/**
 * A port of the session: at its end of its link when it has one (the
 * namespace sends it to its loopback, network.ts), else, or when refused
 * there (a server listening on ::1 only), through its exec init.
 */
export async function connectSessionPort(sandboxAddress: string | undefined, holder: ExecHolder | undefined, port: number): Promise<Duplex> {
  if (sandboxAddress !== undefined) {
    const direct = await connectTcp(sandboxAddress, port).catch(() => undefined);
    if (direct) return direct;
  }
  if (!holder) throw new PortUnreachableError(sandboxAddress === undefined ? "this runner has no exec init (PADDOCK_SANDBOX_INIT) and its sessions no network: their ports are out of reach" : `nothing listens on port ${port} in the session`);
  return connectThroughInit(holder, port);
}
