/**
 * The runner's data plane (decision 0052): one TCP listener that carries
 * previews' bytes straight between a gateway and a session's port, off the
 * bus. A port's connection is offered under a ticket (DATA_TICKET_BYTES
 * random bytes) that the `tunnel` rpc answers over the bus; the gateway
 * dials the listener and writes the ticket first, and from its next byte the
 * connection is the port's, piped both ways with the sockets' own
 * backpressure; a file's read or write takes the socket itself instead
 * (`offerSocket`). A ticket is good once and for DATA_TICKET_TTL_MS; a
 * connection that names no waiting ticket, or none in time, is closed
 * without a byte. Sessions cannot reach the listener (bwrap: no route to any
 * host address but their link's allowed ports), and a ticket is unguessable
 * where they could (process backend).
 */
import { randomBytes } from "node:crypto";
import { createServer, type AddressInfo, type Server, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { DATA_TICKET_BYTES, DATA_TICKET_TTL_MS, type DataPlaneOffer } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { SocketTaker } from "../workspace/file-ops.ts";

/** How long a dialled connection may take to write its ticket. */
export const DATA_PREAMBLE_TIMEOUT_MS = 5_000;
/** A carried connection's bytes tell the idle policy the session is in use at most this often. */
const ACTIVITY_EVERY_MS = 1_000;

export interface DataPlaneOptions {
  host: string;
  /** 0: any free port. */
  port: number;
  /** What gateways dial (the listen host unless it is a wildcard). */
  advertiseHost: string;
  now: () => number;
  after: (ms: number, fn: () => void) => () => void;
  /** Bytes moved on a session's connection: the session is in use (idle policy). */
  onActivity: (sessionId: string) => void;
  log: Logger;
}

type Waiting = { sessionId: string; cancel: () => void } & ({ conn: Duplex; taker?: undefined } | { taker: SocketTaker; conn?: undefined });

/** Lets go of what waits for a connection that will not come. */
function abandon(w: Waiting): void {
  if (w.taker) w.taker.drop();
  else w.conn.destroy();
}

export class DataPlane {
  private server: Server | undefined;
  private readonly waiting = new Map<string, Waiting>();
  /** Every socket dialled in (presenting its ticket, or carried), ended by stop. */
  private readonly sockets = new Set<Socket>();
  /** Carried sockets and when bytes last moved on each. */
  private readonly carried = new Map<Socket, number>();
  private advertised: { host: string; port: number } | undefined;

  constructor(private readonly opts: DataPlaneOptions) {}

  async start(): Promise<void> {
    const server = createServer({ allowHalfOpen: true, noDelay: true }, (socket) => this.accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen({ host: this.opts.host, port: this.opts.port }, () => {
        server.off("error", reject);
        resolve();
      });
    });
    server.on("error", (err) => this.opts.log.error({ err }, "data plane listener failed"));
    this.server = server;
    this.advertised = { host: this.opts.advertiseHost, port: (server.address() as AddressInfo).port };
    this.opts.log.info(this.advertised, "data plane listening");
  }

  async stop(): Promise<void> {
    for (const w of this.waiting.values()) {
      w.cancel();
      abandon(w);
    }
    this.waiting.clear();
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    this.carried.clear();
    const server = this.server;
    this.server = undefined;
    this.advertised = undefined;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** Connections waiting for their gateway plus those carried now (they count against the runner's tunnel limit). */
  get size(): number {
    return this.waiting.size + this.carried.size;
  }

  /**
   * Closes the carried connection whose bytes last moved longest ago, if that
   * is at least idleMs ago: a gateway's kept connection waiting for its next
   * request (the gateway drops it and opens another when it needs one). True
   * when one was closed. Lets a runner at its tunnel limit make room rather
   * than refuse a preview because of connections nobody uses.
   */
  evictIdle(idleMs: number): boolean {
    const now = this.opts.now();
    let oldest: [Socket, number] | undefined;
    for (const [socket, lastBytesAt] of this.carried) if (now - lastBytesAt >= idleMs && (!oldest || lastBytesAt < oldest[1])) oldest = [socket, lastBytesAt];
    if (!oldest) return false;
    this.carried.delete(oldest[0]);
    oldest[0].destroy();
    return true;
  }

  /** Keeps conn for the gateway that dials with the returned ticket; undefined when the data plane is not listening. */
  offer(conn: Duplex, sessionId: string): DataPlaneOffer | undefined {
    const offered = this.ticketFor({ conn, sessionId });
    if (!offered) return undefined;
    // The port's end breaking while it waits is its end.
    conn.once("close", () => {
      const w = this.waiting.get(offered.ticket);
      if (w?.conn !== conn) return;
      this.waiting.delete(offered.ticket);
      w.cancel();
    });
    return offered;
  }

  /** Hands the socket of the gateway that dials with the returned ticket to taker; undefined when the data plane is not listening. */
  offerSocket(taker: SocketTaker, sessionId: string): DataPlaneOffer | undefined {
    return this.ticketFor({ taker, sessionId });
  }

  private ticketFor(use: Omit<Waiting, "cancel">): DataPlaneOffer | undefined {
    if (!this.advertised) return undefined;
    const ticket = randomBytes(DATA_TICKET_BYTES).toString("base64url");
    const cancel = this.opts.after(DATA_TICKET_TTL_MS, () => {
      // Never dialled: what waits for it goes.
      const w = this.waiting.get(ticket);
      if (!w) return;
      this.waiting.delete(ticket);
      abandon(w);
    });
    this.waiting.set(ticket, { ...use, cancel } as Waiting);
    return { ...this.advertised, ticket };
  }

  private accept(socket: Socket): void {
    this.sockets.add(socket);
    socket.once("close", () => this.sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    const cancelTimeout = this.opts.after(DATA_PREAMBLE_TIMEOUT_MS, () => socket.destroy());
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      if (head.byteLength < DATA_TICKET_BYTES) return;
      socket.off("data", onData);
      socket.pause();
      cancelTimeout();
      const ticket = head.subarray(0, DATA_TICKET_BYTES).toString("base64url");
      const w = this.waiting.get(ticket);
      if (!w) {
        socket.destroy();
        return;
      }
      this.waiting.delete(ticket);
      w.cancel();
      if (w.taker) {
        this.opts.onActivity(w.sessionId);
        w.taker.take(socket, head.subarray(DATA_TICKET_BYTES));
      } else this.carry(socket, w.conn, w.sessionId, head.subarray(DATA_TICKET_BYTES));
    };
    socket.on("data", onData);
    socket.once("close", cancelTimeout);
  }

  /** Pipes the gateway's socket and the port's connection both ways; either one ending ends the other's writing, either breaking ends both. */
  private carry(socket: Socket, conn: Duplex, sessionId: string, early: Buffer): void {
    let toldAt = Number.NEGATIVE_INFINITY;
    const touch = () => {
      const now = this.opts.now();
      // Only while carried: an ended connection is not put back.
      if (this.carried.has(socket)) this.carried.set(socket, now);
      if (now - toldAt < ACTIVITY_EVERY_MS) return;
      toldAt = now;
      this.opts.onActivity(sessionId);
    };
    this.carried.set(socket, this.opts.now());
    touch();
    const end = () => {
      this.carried.delete(socket);
      socket.destroy();
      conn.destroy();
    };
    socket.once("close", end);
    conn.once("close", end);
    conn.on("error", end);
    socket.on("data", touch);
    conn.on("data", touch);
    if (early.byteLength > 0) conn.write(early);
    socket.pipe(conn);
    conn.pipe(socket);
    socket.resume();
  }
}
