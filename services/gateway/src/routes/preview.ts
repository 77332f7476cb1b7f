/**
 * ANY /v1/sessions/:id/ports/:port/<rest>: HTTP/1.1 and WebSocket into a
 * declared port of a running session (docs/ports.md). Each request gets a
 * tunnel of its own (TunnelStream, @paddock/bus) through whichever runner
 * holds the session; Node's HTTP client speaks HTTP over it (bodies
 * streamed both ways, chunked, server-sent events), and a WebSocket
 * handshake is written raw and the bytes piped. A public port needs nothing;
 * a private one the bearer token of the session's creator or an admin.
 */
import { request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { callRpc, TunnelStream } from "@paddock/bus";
import { Api, ConflictError, NotFoundError, PaddockError, PREVIEW_TICKET_PARAM, previewPath, TUNNEL_PING_MS, tunnelInSubject, tunnelOutSubject, UnavailableError, workspaceRpcs, type Session } from "@paddock/contracts";
import { realEvery, type GatewayContext } from "../context.ts";
import { sendError, sendJson } from "../http/http.ts";
import { rejectUpgrade } from "../terminal/terminal.ts";
import { forwardRequestHeaders, forwardResponseHeaders, upgradeHead } from "./preview-headers.ts";
import { wakeForUse } from "./wake.ts";
import type { PreviewAccess } from "./preview-access.ts";

/** The app's port did not answer (nothing listens, or the connection broke before an answer): 502. */
export class BadGatewayError extends UnavailableError {}

/** Who wakes a session for a public port's visitor (no principal of their own): recorded on the resume fact. */
const PREVIEW_ACTOR = "preview";
/** A session a request just woke: its port is asked this many times, this far apart, while its app starts. */
const WOKEN_CONNECT_ATTEMPTS = 40;
const WOKEN_CONNECT_RETRY_MS = 250;

const PREVIEW = /^\/v1\/sessions\/([A-Za-z0-9_-]{1,64})\/ports\/(\d{1,5})(\/.*)?$/;

export interface PreviewMatch {
  sessionId: string;
  port: number;
  /** The path the app sees (`/` and below), with the query. */
  path: string;
  /** Whether the URL lacked the slash after the port (answered with a redirect to it). */
  bare: boolean;
}

/** The preview a request path names, or undefined when it names none. */
export function matchPreview(url: string): PreviewMatch | undefined {
  const at = url.indexOf("?");
  const pathname = at < 0 ? url : url.slice(0, at);
  const m = PREVIEW.exec(pathname);
  const port = Number(m?.[2]);
  if (!m || !(port >= 1 && port <= 65_535)) return undefined;
  return { sessionId: m[1] as string, port, path: `${m[3] ?? "/"}${at < 0 ? "" : url.slice(at)}`, bare: m[3] === undefined };
}

/** A preview's error answer: as any route's, but 502 when the app's port did not answer. */
function sendPreviewError(res: ServerResponse, err: unknown): void {
  if (err instanceof BadGatewayError && !res.headersSent) sendJson(res, 502, { error: { code: err.code, message: err.message } });
  else sendError(res, err);
}

export class PreviewProxy {
  constructor(
    private readonly ctx: GatewayContext,
    private readonly access: PreviewAccess,
  ) {}

  /** Proxies one HTTP request; every failure before the app answered is a JSON error (502 when the port did not answer). */
  async handle(req: IncomingMessage, res: ServerResponse, m: PreviewMatch): Promise<void> {
    if (new URL(req.url ?? "/", "http://gateway").searchParams.has(PREVIEW_TICKET_PARAM)) {
      await this.access.redeem(req, res, m.sessionId, m.port).catch((err: unknown) => sendPreviewError(res, err));
      return;
    }
    if (m.bare) {
      // Relative links of the app resolve below the port only with the slash.
      res.writeHead(308, { location: previewPath(m.sessionId, m.port) + (req.url?.includes("?") ? req.url.slice(req.url.indexOf("?")) : "") }).end();
      return;
    }
    let tunnel: TunnelStream;
    try {
      tunnel = await this.open(req, m);
    } catch (err) {
      req.resume();
      sendPreviewError(res, err);
      return;
    }
    const upstream = httpRequest({ method: req.method, path: m.path, headers: forwardRequestHeaders(req.headers, m.port, false), createConnection: () => tunnel });
    const fail = (err: unknown) => {
      tunnel.destroy();
      if (!res.headersSent) sendPreviewError(res, err instanceof PaddockError ? err : new BadGatewayError(`port ${m.port} of the session did not answer: ${err instanceof Error ? err.message : "connection lost"}`));
      else res.destroy();
    };
    upstream.on("error", fail);
    upstream.once("response", (answer) => {
      res.writeHead(answer.statusCode ?? 502, forwardResponseHeaders(answer.rawHeaders, previewPath(m.sessionId, m.port)));
      answer.pipe(res);
      answer.on("error", fail);
      // An answer cut short (the tunnel broke, whether or not Node calls it an error) is cut for the client too, never ended.
      answer.once("close", () => {
        if (!answer.complete) res.destroy();
      });
    });
    // The client leaving ends the request to the app (and with it the tunnel and the runner's connection).
    res.once("close", () => {
      if (!res.writableFinished) upstream.destroy();
      tunnel.destroy();
    });
    req.pipe(upstream);
  }

  /** Proxies a WebSocket (any upgrade): the handshake written raw into the tunnel, then bytes both ways. */
  async handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, m: PreviewMatch): Promise<void> {
    let tunnel: TunnelStream;
    try {
      if (m.bare) throw new NotFoundError("preview path (it ends with a slash after the port)");
      tunnel = await this.open(req, m);
    } catch (err) {
      rejectUpgrade(socket, err);
      return;
    }
    tunnel.write(upgradeHead(req.method ?? "GET", m.path, forwardRequestHeaders(req.headers, m.port, true)));
    if (head.byteLength > 0) tunnel.write(head);
    const end = () => {
      socket.destroy();
      tunnel.destroy();
    };
    for (const s of [socket, tunnel]) s.on("error", end).once("close", end);
    socket.pipe(tunnel);
    tunnel.pipe(socket);
  }

  /** The session behind the URL, authorized for this caller, and a tunnel to its port through its runner. */
  private async open(req: IncomingMessage, m: PreviewMatch): Promise<TunnelStream> {
    const { ctx } = this;
    const target = await callRpc(ctx.deps.nc, Api.previewTarget, { sessionId: m.sessionId, port: m.port }, { timeoutMs: ctx.deps.config.rpcTimeoutMs });
    const scope = target.public ? { workspaceId: target.session.workspaceId, actor: { id: PREVIEW_ACTOR, kind: "service" as const } } : (await this.access.principalFor(req, target.session, m.port)).scope;
    // Wake on use: a suspended session runs again for the request (a public port's visitor wakes it too).
    const s = await wakeForUse(ctx, scope, target.session, req.socket);
    // Just woken, its app may still be starting: its port is asked again for a while before a 502.
    const woken = s !== target.session;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.connect(s, m.port);
      } catch (err) {
        if (!woken || !(err instanceof BadGatewayError) || attempt >= WOKEN_CONNECT_ATTEMPTS || req.socket.destroyed) throw err;
        await new Promise<void>((resolve) => ctx.after(WOKEN_CONNECT_RETRY_MS, resolve));
      }
    }
  }

  /** A tunnel to the port through the runner holding the running session s. */
  private async connect(s: Session, port: number): Promise<TunnelStream> {
    const { ctx } = this;
    if (s.state !== "running" || !s.poolId || !s.runnerId) throw new ConflictError(`session is ${s.state}: its ports answer while it runs`);
    const tunnelId = ctx.deps.newId();
    const tunnel = new TunnelStream({ nc: ctx.deps.nc, sendTo: tunnelInSubject(s.poolId, s.runnerId, tunnelId), every: ctx.deps.every ?? realEvery, pingMs: TUNNEL_PING_MS });
    const sub = ctx.deps.nc.subscribe(tunnelOutSubject(s.poolId, s.runnerId, tunnelId), {
      callback: (err, msg) => {
        if (err) tunnel.destroy(err);
        else tunnel.receive(msg);
      },
    });
    tunnel.once("close", () => sub.unsubscribe());
    // Its error is seen by whoever uses it (the HTTP client, the upgrade's pipes) and, after they let
    // go (an abort arriving once the answer is complete), by no one: never an unhandled one.
    tunnel.on("error", () => undefined);
    try {
      const request = { sessionId: s.id, workspaceId: s.workspaceId, placementGeneration: s.placementGeneration, port, tunnelId };
      const opened = await callRpc(ctx.deps.nc, workspaceRpcs(s.poolId, s.runnerId).tunnel, request, { timeoutMs: ctx.deps.config.workspaceRpcTimeoutMs });
      if (!opened.connected) throw new BadGatewayError(`nothing listens on port ${port} in the session`);
    } catch (err) {
      tunnel.destroy();
      throw err;
    }
    return tunnel;
  }

}
