import type { IncomingMessage, Server, ServerResponse } from "node:http";

/**
 * Graceful close of the public HTTP server (a rolling restart, issue #29 item
 * 6): stop accepting, let every request in flight finish and be answered,
 * close each keep-alive socket once it is idle, and only after `graceMs`
 * close whatever is still open (a long poll, a stream). Closing every
 * connection at once — what the gateway did — cut requests the gateway had
 * already read, so a client saw a reset instead of its answer.
 */
export class GracefulClose {
  private readonly inFlight = new Set<ServerResponse>();
  private closing = false;

  constructor(private readonly server: Server) {}

  /** Called first thing for every request: tracks it, and tells a client that arrives while closing not to reuse the socket. */
  track(_req: IncomingMessage, res: ServerResponse): void {
    this.inFlight.add(res);
    const done = () => this.inFlight.delete(res);
    res.once("finish", done);
    res.once("close", done);
    if (this.closing) sayClose(res);
  }

  /** Requests being answered now. */
  get pending(): number {
    return this.inFlight.size;
  }

  /** Resolves once the server is closed; `forced` when the grace ran out with connections still open. */
  close(graceMs: number, pollMs = 50): Promise<{ forced: boolean }> {
    this.closing = true;
    for (const res of this.inFlight) sayClose(res);
    return new Promise((resolve) => {
      let forced = false;
      // A socket whose response ends after close() is idle from then on: closed on the next poll.
      const idle = setInterval(() => this.server.closeIdleConnections(), pollMs);
      const timer = setTimeout(() => {
        forced = true;
        this.server.closeAllConnections();
      }, graceMs);
      this.server.close(() => {
        clearInterval(idle);
        clearTimeout(timer);
        resolve({ forced });
      });
      this.server.closeIdleConnections();
    });
  }
}

/** `Connection: close` on an answer not yet started: the client opens a new connection (to another gateway) for its next request. */
function sayClose(res: ServerResponse): void {
  if (!res.headersSent) res.setHeader("connection", "close");
}
