import { STATUS_CODES, type Server } from "node:http";
import type { Socket } from "node:net";
import { UnavailableError, type PaddockError } from "@paddock/contracts";
import { errorResponse } from "./http.ts";
import { RateLimitedError } from "./limits.ts";

export interface ConnectionLimits {
  /** Open TCP connections (HTTP, keep-alive, WebSocket) the gateway holds in all; more are answered 503. */
  maxConnections: number;
  /** Open connections from one client address; more are answered 429. */
  maxConnectionsPerAddress: number;
}

/**
 * Counts the gateway's open connections, in all and per client address, and
 * turns away a connection over either cap at once, with a plain HTTP error
 * response and a close (its request, if any, is never handled). With the
 * header timeout this bounds what a client can hold by opening sockets and
 * trickling headers: its own address's share, for at most the timeout each.
 */
export class ConnectionGate {
  private open = 0;
  private readonly byAddress = new Map<string, number>();
  private readonly refused = new WeakSet<Socket>();

  constructor(
    private readonly limits: ConnectionLimits,
    private readonly onRefused: (reason: "total" | "per_address") => void,
  ) {}

  /** Runs before the HTTP server's own connection handling. */
  attach(server: Server): void {
    server.prependListener("connection", (socket: Socket) => this.admit(socket));
  }

  /** Whether a connection was turned away (its parsed requests and upgrades are dropped). */
  isRefused(socket: Socket): boolean {
    return this.refused.has(socket);
  }

  private admit(socket: Socket): void {
    const address = socket.remoteAddress ?? "unknown";
    const fromHere = this.byAddress.get(address) ?? 0;
    if (this.open >= this.limits.maxConnections) {
      this.refuse(socket, new UnavailableError(`the gateway holds its limit of ${this.limits.maxConnections} connections: try again`), "total");
      return;
    }
    if (fromHere >= this.limits.maxConnectionsPerAddress) {
      this.refuse(socket, new RateLimitedError(`at most ${this.limits.maxConnectionsPerAddress} open connections per client address`, 1), "per_address");
      return;
    }
    this.open++;
    this.byAddress.set(address, fromHere + 1);
    socket.once("close", () => {
      this.open--;
      const left = (this.byAddress.get(address) ?? 1) - 1;
      if (left > 0) this.byAddress.set(address, left);
      else this.byAddress.delete(address);
    });
  }

  private refuse(socket: Socket, err: PaddockError, reason: "total" | "per_address"): void {
    this.refused.add(socket);
    this.onRefused(reason);
    socket.on("error", () => socket.destroy());
    const { status, body } = errorResponse(err);
    const text = JSON.stringify(body);
    const retry = err instanceof RateLimitedError ? `Retry-After: ${err.retryAfterS}\r\n` : "";
    // Answered before any byte is read; then closed (destroyed once the answer is flushed).
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Error"}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n${retry}Connection: close\r\n\r\n${text}`,
      () => socket.destroy(),
    );
  }
}
