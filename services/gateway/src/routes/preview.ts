/**
 * ANY /v1/sessions/:id/ports/:port/<rest>: HTTP/1.1 and WebSocket into a
 * declared port of a running session (docs/ports.md), through whichever
 * runner holds the session on connections PreviewPool opens and keeps
 * (preview-pool.ts); Node's HTTP client speaks HTTP over them (bodies
 * streamed both ways, chunked, server-sent events), and a WebSocket
 * handshake is written raw on a connection of its own and the bytes piped. A public port needs nothing;
 * a private one the bearer token of the session's creator or an admin.
 */
import { request as httpRequest, type ClientRequest, type IncomingMessage, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { NotFoundError, PaddockError, PREVIEW_TICKET_PARAM, previewPath } from "@paddock/contracts";
import type { GatewayContext } from "../context.ts";
import { sendError, sendJson } from "../http/http.ts";
import { rejectUpgrade } from "../terminal/terminal.ts";
import { forwardRequestHeaders, forwardResponseHeaders, upgradeHead } from "./preview-headers.ts";
import type { PreviewMatch } from "./preview-match.ts";
import { wakeForUse } from "./wake.ts";
import type { PreviewAccess } from "./preview-access.ts";
import type { DataPlaneDialer } from "./data-plane.ts";
import { BadGatewayError, PreviewPool, type PortRoute, type PreviewTarget } from "./preview-pool.ts";

export { BadGatewayError } from "./preview-pool.ts";

/** Who wakes a session for a public port's visitor (no principal of their own): recorded on the resume fact. */
const PREVIEW_ACTOR = "preview";
/** A session a request just woke: its port is asked this many times, this far apart, while its app starts. */
const WOKEN_CONNECT_ATTEMPTS = 40;
const WOKEN_CONNECT_RETRY_MS = 250;

/** A preview's error answer: as any route's, but 502 when the app's port did not answer. */
function sendPreviewError(res: ServerResponse, err: unknown): void {
  if (err instanceof BadGatewayError && !res.headersSent) sendJson(res, 502, { error: { code: err.code, message: err.message } });
  else sendError(res, err);
}

/** Methods whose request has no body to resend: retried once when a kept connection turns out closed. */
const RESENDABLE = new Set(["GET", "HEAD", "OPTIONS"]);

export class PreviewProxy {
  private readonly pool: PreviewPool;

  constructor(
    private readonly ctx: GatewayContext,
    private readonly access: PreviewAccess,
    dialer: DataPlaneDialer,
  ) {
    this.pool = new PreviewPool(ctx, dialer);
  }

  stop(): void {
    this.pool.stop();
  }

  /** Proxies one HTTP request; every failure before the app answered is a JSON error (502 when the port did not answer). */
  async handle(req: IncomingMessage, res: ServerResponse, m: PreviewMatch): Promise<void> {
    if (new URL(req.url ?? "/", "http://gateway").searchParams.has(PREVIEW_TICKET_PARAM)) {
      await this.access.redeem(req, res, m).catch((err: unknown) => sendPreviewError(res, err));
      return;
    }
    if (m.bare) {
      // Relative links of the app resolve below the port only with the slash.
      res.writeHead(308, { location: previewPath(m.sessionId, m.port) + (req.url?.includes("?") ? req.url.slice(req.url.indexOf("?")) : "") }).end();
      return;
    }
    let route: PortRoute;
    let conn: Duplex | undefined;
    try {
      ({ route, conn } = await this.prepare(req, m));
    } catch (err) {
      req.resume();
      sendPreviewError(res, err);
      return;
    }
    const bodiless = RESENDABLE.has(req.method ?? "") && req.headers["content-length"] === undefined && req.headers["transfer-encoding"] === undefined;
    if (bodiless) req.resume();
    this.forward(req, res, m, route, conn, bodiless, bodiless);
  }

  /**
   * One request to the app on conn (a kept connection when undefined).
   * bodiless: nothing of req is sent but its head; resend: it may go again
   * once, on a new connection, if a kept one was closed under it.
   */
  private forward(req: IncomingMessage, res: ServerResponse, m: PreviewMatch, route: PortRoute, conn: Duplex | undefined, bodiless: boolean, resend: boolean): void {
    const options = { method: req.method, path: m.path, headers: forwardRequestHeaders(req.headers, m.port, false), agent: this.pool.agent, paddockRoute: route, ...(conn ? { paddockSocket: conn } : {}) };
    const upstream: ClientRequest = httpRequest(options);
    // The agent may have found a kept connection after all: the one opened for this request is not needed.
    upstream.once("socket", (socket) => {
      if (conn && socket !== conn) conn.destroy();
    });
    const fail = (err: unknown) => {
      if (!res.headersSent && resend && upstream.reusedSocket && !(err instanceof PaddockError)) {
        // A kept connection closed under the request: the session may have suspended or moved since
        // its target was read, so it is read again (and woken) before the request goes once more.
        this.pool.forget(m.sessionId, m.port);
        this.prepare(req, m, true).then(
          (again) => this.forward(req, res, m, again.route, again.conn, bodiless, false),
          (e: unknown) => sendPreviewError(res, e),
        );
        return;
      }
      if (!res.headersSent) sendPreviewError(res, err instanceof PaddockError ? err : new BadGatewayError(`port ${m.port} of the session did not answer: ${err instanceof Error ? err.message : "connection lost"}`));
      else res.destroy();
    };
    upstream.on("error", fail);
    upstream.once("response", (answer) => {
      res.writeHead(answer.statusCode ?? 502, forwardResponseHeaders(answer.rawHeaders, m.prefix, m.sandboxed));
      answer.pipe(res);
      answer.on("error", fail);
      // An answer cut short (the connection broke, whether or not Node calls it an error) is cut for the client too, never ended.
      answer.once("close", () => {
        if (!answer.complete) res.destroy();
      });
    });
    // The client leaving before the answer was sent ends the request to the app (and its connection, never kept).
    res.once("close", () => {
      if (!res.writableFinished) upstream.destroy();
    });
    if (bodiless) upstream.end();
    else req.pipe(upstream);
  }

  /** Proxies a WebSocket (any upgrade): the handshake written raw on a connection of its own, then bytes both ways. */
  async handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, m: PreviewMatch): Promise<void> {
    let conn: Duplex;
    try {
      if (m.bare) throw new NotFoundError("preview path (it ends with a slash after the port)");
      // own: a connection of its own, never a kept one (prepare opens it).
      conn = (await this.prepare(req, m, true)).conn as Duplex;
    } catch (err) {
      rejectUpgrade(socket, err);
      return;
    }
    conn.write(upgradeHead(req.method ?? "GET", m.path, forwardRequestHeaders(req.headers, m.port, true)));
    if (head.byteLength > 0) conn.write(head);
    const end = () => {
      socket.destroy();
      conn.destroy();
    };
    for (const s of [socket, conn]) s.on("error", end).once("close", end);
    socket.pipe(conn);
    conn.pipe(socket);
  }

  /**
   * The running session behind the URL, authorized for this caller, and a
   * connection to its port unless a kept one waits (own: always one). A
   * kept target the runner refuses (the session suspended, moved, or the
   * port turned private) is read again once.
   */
  private async prepare(req: IncomingMessage, m: PreviewMatch, own = false): Promise<{ route: PortRoute; conn: Duplex | undefined }> {
    const target = await this.pool.target(m.sessionId, m.port);
    try {
      return await this.prepareOn(req, m, target, own);
    } catch (err) {
      // Errors of the runner's rpc arrive as their code.
      if (!target.kept || !(err instanceof PaddockError) || !(err.code === "conflict" || err.code === "not_found")) throw err;
      this.pool.forget(m.sessionId, m.port);
      return this.prepareOn(req, m, await this.pool.target(m.sessionId, m.port, true), own);
    }
  }

  private async prepareOn(req: IncomingMessage, m: PreviewMatch, target: PreviewTarget, own: boolean): Promise<{ route: PortRoute; conn: Duplex | undefined }> {
    const { ctx } = this;
    const scope = target.public ? { workspaceId: target.session.workspaceId, actor: { id: PREVIEW_ACTOR, kind: "service" as const } } : (await this.access.principalFor(req, target.session, m.port)).scope;
    // Wake on use: a suspended session runs again for the request (a public port's visitor wakes it too).
    const s = await wakeForUse(ctx, scope, target.session, req.socket);
    const route = { session: s, port: m.port, publicOnly: target.public };
    if (!own && s === target.session && this.pool.hasKept(route)) return { route, conn: undefined };
    // Just woken, its app may still be starting: its port is asked again for a while before a 502.
    const woken = s !== target.session;
    for (let attempt = 1; ; attempt++) {
      try {
        return { route, conn: await this.pool.open(route) };
      } catch (err) {
        if (!woken || !(err instanceof BadGatewayError) || attempt >= WOKEN_CONNECT_ATTEMPTS || req.socket.destroyed) throw err;
        await new Promise<void>((resolve) => ctx.after(WOKEN_CONNECT_RETRY_MS, resolve));
      }
    }
  }
}
