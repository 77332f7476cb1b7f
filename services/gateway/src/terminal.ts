import { STATUS_CODES, type IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { headers } from "@nats-io/transport-node";
import { WebSocketServer } from "ws";
import { Api, AttachQuery, Headers, NotFoundError, PaddockError, Streams, Subjects } from "@paddock/contracts";
import { Action } from "./auth.ts";
import { Attachment, ClaimWatch, type AttachGrant } from "./attachment.ts";
import { resolveApp, sessionResource, type GatewayContext } from "./context.ts";
import { errorResponse, parseWith, queryObject } from "./http.ts";
import { PresenceTracker } from "./presence.ts";
import { lastSeqOf } from "./termlog.ts";

const KEEPALIVE_MS = 30_000;
const TERMINAL_PATH = /^\/v1\/sessions\/([^/]+)\/terminal$/;

/** Serves GET /v1/sessions/:id/terminal: every check happens before the upgrade is accepted. */
export class TerminalHub {
  private readonly wss: WebSocketServer;
  private readonly attachments = new Set<Attachment>();
  private readonly pending = new Set<Duplex>();
  private readonly keepalive: NodeJS.Timeout;
  readonly presence: PresenceTracker;

  constructor(private readonly ctx: GatewayContext) {
    this.presence = new PresenceTracker(ctx);
    this.wss = new WebSocketServer({ noServer: true, maxPayload: ctx.deps.config.wsMaxPayloadBytes, clientTracking: false });
    // Dead peers (no close, no FIN) would hold a consumer forever: ping, and drop the silent.
    this.keepalive = setInterval(() => {
      for (const a of [...this.attachments]) a.heartbeat();
    }, KEEPALIVE_MS);
    this.keepalive.unref();
  }

  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on("error", () => socket.destroy());
    this.pending.add(socket);
    const mode = new URL(req.url ?? "/", "http://gateway").searchParams.get("mode") === "controller" ? "controller" : "viewer";
    this.prepare(req).then(
      (grant) => {
        this.pending.delete(socket);
        if (socket.destroyed) {
          grant.claims?.stop();
          return;
        }
        this.ctx.deps.metrics.wsAttaches.inc({ mode, outcome: "ok" });
        this.wss.handleUpgrade(req, socket, head, (ws) => {
          const a = new Attachment(this.ctx, ws, grant, (done) => {
            this.attachments.delete(done);
            this.presence.leave(done);
          });
          this.attachments.add(a);
          this.presence.join(a);
          a.start();
        });
      },
      (err: unknown) => {
        this.pending.delete(socket);
        const code = err instanceof PaddockError ? err.code : "internal";
        this.ctx.deps.metrics.wsAttaches.inc({ mode, outcome: code });
        if (!(err instanceof PaddockError)) this.ctx.deps.log.error({ err }, "terminal attach failed");
        rejectUpgrade(socket, err);
      },
    );
  }

  private async prepare(req: IncomingMessage): Promise<AttachGrant> {
    const url = new URL(req.url ?? "/", "http://gateway");
    const m = TERMINAL_PATH.exec(url.pathname);
    if (!m || req.method !== "GET") throw new NotFoundError("endpoint");
    const scope = await this.ctx.authenticate(req);
    const query = parseWith(AttachQuery, queryObject(url.searchParams), "query");
    const current = await this.ctx.getSession(scope, m[1]);
    const action = query.mode === "controller" ? Action.attachController : Action.attachViewer;
    await this.ctx.authorizer.authorize(scope, action, sessionResource(current));
    const app = resolveApp(current, query.app);
    const jsm = await this.ctx.jsm();
    if (query.mode === "viewer") {
      return {
        scope,
        session: current,
        app,
        mode: "viewer",
        since: query.since,
        helloCursor: await lastSeqOf(jsm, Streams.term, Subjects.term(current.id, app)),
        controllerGeneration: current.controllerGeneration,
      };
    }
    const inputSubject = Subjects.input(current.id, app);
    const claims = new ClaimWatch(this.ctx, inputSubject);
    try {
      const { session } = await this.ctx.call(Api.attachSession, { scope, sessionId: current.id, mode: "controller" });
      claims.grant(session.controllerGeneration);
      const h = headers();
      h.set(Headers.inputKind, "claim");
      h.set(Headers.controllerGeneration, String(session.controllerGeneration));
      this.ctx.deps.nc.publish(inputSubject, new Uint8Array(0), { headers: h });
      return {
        scope,
        session,
        app,
        mode: "controller",
        since: query.since,
        helloCursor: await lastSeqOf(jsm, Streams.term, Subjects.term(session.id, app)),
        controllerGeneration: session.controllerGeneration,
        claims,
      };
    } catch (err) {
      claims.stop();
      throw err;
    }
  }

  /** Closes every terminal socket (1001) and refuses pending upgrades. */
  close(): void {
    clearInterval(this.keepalive);
    for (const a of [...this.attachments]) a.shutdown();
    for (const s of this.pending) s.destroy();
    this.wss.close();
  }

  get openCount(): number {
    return this.attachments.size;
  }
}

/** Answers a refused upgrade with a plain HTTP error response, before any WebSocket exists. */
function rejectUpgrade(socket: Duplex, err: unknown): void {
  if (socket.destroyed) return;
  const { status, body } = errorResponse(err);
  const text = JSON.stringify(body);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Error"}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
  );
}
