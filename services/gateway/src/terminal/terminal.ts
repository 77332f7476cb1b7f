import { STATUS_CODES, type IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { headers } from "@nats-io/transport-node";
import { WebSocketServer } from "ws";
import {
  Api,
  AttachQuery,
  HttpApi,
  pathPattern,
  ForbiddenError,
  Headers,
  Id,
  InputKind,
  InvalidError,
  NotFoundError,
  PaddockError,
  Streams,
  Subjects,
  type AttachMode,
  type Scope,
  type Session,
} from "@paddock/contracts";
import { Action, type Principal } from "../auth/auth.ts";
import { Attachment, type AttachGrant } from "./attachment.ts";
import { ClaimWatch } from "../auth/claims.ts";
import { resolveApp, sessionResource, type GatewayContext } from "../context.ts";
import { errorResponse, parseWith, queryObject } from "../http/http.ts";
import { RateLimitedError } from "../http/limits.ts";
import { isAllowedOrigin } from "../http/origin.ts";
import { PresenceTracker } from "./presence.ts";
import { StreamGuard } from "../auth/revocation.ts";
import { consumeTicket } from "../auth/tokens.ts";
import { lastSeqOf } from "./termlog.ts";

const KEEPALIVE_MS = 30_000;
/** The contract route this upgrade serves (its query is AttachQuery). */
export const TERMINAL_ROUTE = HttpApi.attachTerminal;
const TERMINAL_PATH = pathPattern(TERMINAL_ROUTE.path);

/** Serves GET /v1/sessions/:id/terminal: every check happens before the upgrade is accepted. */
export class TerminalHub {
  private readonly wss: WebSocketServer;
  private readonly attachments = new Set<Attachment>();
  private readonly pending = new Set<Duplex>();
  private keepalive: NodeJS.Timeout | undefined;
  /** Sockets per session, open or being prepared (the per-session attach limit). */
  private readonly slots = new Map<string, number>();
  readonly presence: PresenceTracker;
  readonly guard: StreamGuard;

  /**
   * wake: resumes a suspended session for a controller's attach (wake on
   * use; routes/wake.ts, passed in by the gateway: terminal/ never imports
   * routes/). Absent: a controller attaches to the session as it is.
   */
  constructor(
    private readonly ctx: GatewayContext,
    private readonly wake?: (scope: Scope, session: Session, closer: { once(e: "close", f: () => void): unknown; off(e: "close", f: () => void): unknown }) => Promise<Session>,
  ) {
    this.presence = new PresenceTracker(ctx);
    this.guard = new StreamGuard(ctx);
    this.wss = new WebSocketServer({ noServer: true, maxPayload: ctx.deps.config.wsMaxPayloadBytes, clientTracking: false });
  }

  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    // Started by the first upgrade, so creating a gateway starts nothing. Dead
    // peers (no close, no FIN) would hold a consumer forever: ping, and drop the silent.
    this.keepalive ??= setInterval(() => {
      for (const a of [...this.attachments]) a.heartbeat();
    }, KEEPALIVE_MS).unref();
    socket.on("error", () => socket.destroy());
    this.pending.add(socket);
    const mode = new URL(req.url ?? "/", "http://gateway").searchParams.get("mode") === "controller" ? "controller" : "viewer";
    this.prepare(req).then(
      (grant) => {
        this.pending.delete(socket);
        if (socket.destroyed) {
          grant.claims?.stop();
          this.release(grant.session.id);
          return;
        }
        this.ctx.deps.metrics.wsAttaches.inc({ mode: grant.mode, outcome: "ok" });
        this.wss.handleUpgrade(req, socket, head, (ws) => {
          const a = new Attachment(this.ctx, ws, grant, (done) => {
            this.attachments.delete(done);
            this.presence.leave(done);
            this.guard.remove(done);
            this.release(done.sessionId);
          });
          this.attachments.add(a);
          this.presence.join(a);
          a.start();
          // Lives by its token and by the access it was granted: re-authorized on every change of either.
          const action = grant.mode === "controller" ? Action.attachController : Action.attachViewer;
          this.guard.add(a, grant.principal, (scope) => this.ctx.authorizer.authorize(scope, action, sessionResource(grant.session)));
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
    if (!m || req.method !== TERMINAL_ROUTE.method) throw new NotFoundError("endpoint");
    // A browser page may only open a terminal from the gateway's own origin (its console) or an
    // allowed one (the cookie-less ticket still must not be usable from any site that gets hold of one).
    if (!isAllowedOrigin(req, this.ctx.deps.config.allowedOrigins)) throw new ForbiddenError("origin not allowed");
    const raw = queryObject(url.searchParams);
    if ("token" in raw || "access_token" in raw) {
      throw new InvalidError("query: never put a token in a URL: send the Authorization header, or use an attach ticket (?ticket=)");
    }
    // From here on a token change must reach this socket: the watch runs before authentication.
    await this.guard.ready();
    let principal: Principal;
    let query: AttachQuery;
    let mode: AttachMode;
    if (raw.ticket !== undefined) {
      if (req.headers.authorization !== undefined) throw new InvalidError("give the Authorization header or ?ticket=, not both");
      // Validate before spending the ticket: a typo must not burn it.
      query = parseWith(AttachQuery, raw, "query");
      const t = await consumeTicket(this.ctx, raw.ticket, parseWith(Id, m[1], "session id"), raw.mode !== undefined ? query.mode : undefined);
      principal = t.principal;
      mode = t.mode;
    } else {
      principal = await this.ctx.principal(req);
      query = parseWith(AttachQuery, raw, "query");
      mode = query.mode;
    }
    const { scope } = principal;
    // Re-checked here even with a ticket: the policy at use decides, not the one at issue.
    const found = await this.ctx.getSession(scope, m[1]);
    const action = mode === "controller" ? Action.attachController : Action.attachViewer;
    await this.ctx.authorizer.authorize(scope, action, sessionResource(found));
    // A controller's attach wakes a suspended session (a viewer's never does).
    const current = mode === "controller" && this.wake ? await this.wake(scope, found, req.socket) : found;
    this.reserve(current.id);
    try {
      return { ...(await this.grantFor(principal, current, query, mode)), principal };
    } catch (err) {
      this.release(current.id);
      throw err;
    }
  }

  /** Takes one of the session's attach slots, or refuses (429) when all are taken. */
  private reserve(sessionId: string): void {
    const used = this.slots.get(sessionId) ?? 0;
    if (used >= this.ctx.deps.config.maxAttachPerSession) {
      throw new RateLimitedError(`at most ${this.ctx.deps.config.maxAttachPerSession} terminal connections per session`, 1);
    }
    this.slots.set(sessionId, used + 1);
  }

  private release(sessionId: string): void {
    const used = (this.slots.get(sessionId) ?? 0) - 1;
    if (used > 0) this.slots.set(sessionId, used);
    else this.slots.delete(sessionId);
  }

  private async grantFor(
    principal: Principal,
    current: Session,
    query: AttachQuery,
    mode: AttachMode,
  ): Promise<Omit<AttachGrant, "principal">> {
    const { scope } = principal;
    const app = resolveApp(current, query.app);
    const jsm = await this.ctx.jsm();
    if (mode === "viewer") {
      return {
        scope,
        session: current,
        app,
        mode: "viewer",
        since: query.since,
        helloCursor: await lastSeqOf(jsm, Streams.term, Subjects.termOfApp(current.id, app)),
        controllerGeneration: current.controllerGeneration,
      };
    }
    const claimSubject = Subjects.claim(current.id, app);
    const claims = new ClaimWatch(this.ctx, claimSubject);
    try {
      const { session } = await this.ctx.call(Api.attachSession, { scope, sessionId: current.id, mode: "controller" });
      claims.grant(session.controllerGeneration);
      const h = headers();
      h.set(Headers.inputKind, InputKind.claim);
      h.set(Headers.controllerGeneration, String(session.controllerGeneration));
      // Every gateway's older controllers, and the runner holding the session (it drops older input from now on).
      this.ctx.deps.nc.publish(claimSubject, new Uint8Array(0), { headers: h });
      if (session.poolId !== undefined && session.runnerId !== undefined) {
        this.ctx.deps.nc.publish(Subjects.input(session.poolId, session.runnerId, session.id, app), new Uint8Array(0), { headers: h });
      }
      return {
        scope,
        session,
        app,
        mode: "controller",
        since: query.since,
        helloCursor: await lastSeqOf(jsm, Streams.term, Subjects.termOfApp(session.id, app)),
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
    this.guard.stop();
    for (const a of [...this.attachments]) a.shutdown();
    for (const s of this.pending) s.destroy();
    this.wss.close();
  }

  get openCount(): number {
    return this.attachments.size;
  }
}

/** Answers a refused upgrade with a plain HTTP error response, before any WebSocket exists. */
export function rejectUpgrade(socket: Duplex, err: unknown): void {
  if (socket.destroyed) return;
  const { status, body } = errorResponse(err);
  const text = JSON.stringify(body);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Error"}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
  );
}
