/**
 * A connection to one of a session's ports as a Node Duplex, whatever made
 * it: a socket on the host's loopback (process backend), or a tunnel the
 * session's exec init opened inside its network namespace (bwrap).
 */
import { connect as netConnect, type Socket } from "node:net";
import { Duplex } from "node:stream";
import { PortUnreachableError } from "@paddock/contracts";
import type { AppProcess } from "./process-group.ts";

/**
 * A sandbox's open port connections. A freeze ends them: a frozen app would
 * hold a preview's client (and a gateway's kept-alive connection) forever,
 * where an ended one is an error the gateway answers and recovers from.
 */
export class OpenPorts {
  private readonly open = new Set<Duplex>();

  track(conn: Duplex): Duplex {
    this.open.add(conn);
    conn.once("close", () => this.open.delete(conn));
    return conn;
  }

  closeAll(): void {
    for (const conn of this.open) conn.destroy();
    this.open.clear();
  }
}

/** Bytes written to the init for the tunnel, waiting for the connection to take them, past which writes wait. */
const QUEUED_MAX_BYTES = 512 * 1024;

/** An init tunnel (exec-holder.ts `connect`) as a Duplex; `onData` and `onDrained` of the tunnel go to `feed`. */
export class InitPortConnection extends Duplex {
  private proc: AppProcess | undefined;
  private readonly early: Array<Uint8Array | null> = [];
  /** The peer sent its last byte (null fed), and our side ended its writing (_final): the tunnel's exit is then its clean end. */
  private drained = false;
  private inputEnded = false;

  constructor() {
    super({ allowHalfOpen: true });
  }

  /** The tunnel's bytes (null: its peer ended), in order; before attach they wait. */
  feed(bytes: Uint8Array | null): void {
    if (!this.proc) {
      this.early.push(bytes);
      return;
    }
    if (bytes === null) this.drained = true;
    if (!this.push(bytes) && bytes !== null) this.proc.setPaused(true);
  }

  /** Binds the tunnel's process once it connected; it ending before both halves did is an error. */
  attach(proc: AppProcess): void {
    this.proc = proc;
    for (const bytes of this.early.splice(0)) this.feed(bytes);
    // Ended cleanly once both halves did (its last bytes may still wait in the buffer for the reader: they are read
    // on); anything else (reset, the init gone, an abort) is an error.
    void proc.exited.then((exit) => {
      const clean = this.drained && this.inputEnded && exit.exitCode === 0;
      if (!this.destroyed && !clean) this.destroy(new PortUnreachableError(`the connection to the port ended (${exit.exitCode ?? exit.signal ?? "?"})`));
    });
  }

  override _read(): void {
    this.proc?.setPaused(false);
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, callback: (err?: Error | null) => void): void {
    const proc = this.proc;
    if (!proc || proc.input.closed) {
      callback(new PortUnreachableError("the connection to the port is closed"));
      return;
    }
    proc.input.push(chunk);
    // The init takes bytes as the port reads them: hold the writer while too many wait.
    if (proc.input.queuedBytes <= QUEUED_MAX_BYTES) callback();
    else proc.input.whenBelow(QUEUED_MAX_BYTES, () => callback());
  }

  override _final(callback: (err?: Error | null) => void): void {
    this.inputEnded = true;
    this.proc?.endInput();
    callback();
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    // An abort (not both halves ended): the init closes the socket at once.
    if (this.proc && !(this.drained && this.inputEnded)) this.proc.signal("SIGKILL");
    callback(err);
  }
}

/**
 * A loopback connection on the host (the process backend: sessions listen on
 * the host's own loopback): 127.0.0.1, then ::1 (a server bound to
 * `localhost` may listen on either).
 */
export async function connectHostLoopback(port: number): Promise<Duplex> {
  try {
    return await connectTcp("127.0.0.1", port);
  } catch {
    try {
      return await connectTcp("::1", port);
    } catch {
      throw new PortUnreachableError(`nothing listens on port ${port} in the session`);
    }
  }
}

/** A TCP connection to host:port, resolved once connected (half-open: a preview's request may end before its answer). */
export function connectTcp(host: string, port: number): Promise<Socket> {
  return new Promise<Socket>((resolve, reject) => {
    const socket = netConnect({ port, host, allowHalfOpen: true, noDelay: true });
    socket.once("connect", () => {
      socket.off("error", reject);
      resolve(socket);
    });
    socket.once("error", reject);
  });
}
