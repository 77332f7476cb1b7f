/**
 * GET /v1/sessions/:id/files/watch?path=P: a WebSocket of change frames
 * (docs/workspace.md, Watching files). Served like the terminal upgrade:
 * every check (token or attach ticket, origin, query, session, Authorizer,
 * a live sandbox, the runner accepting the watch) happens before the upgrade
 * is accepted, so a refusal is a plain HTTP error. The runner holding the
 * session watches; this socket subscribes to the watch's batches (core NATS)
 * before asking for it, renews its lease every third of it while open, and
 * asks the runner to stop it on close (a gateway that dies leaves a lease
 * that lapses).
 */
import { STATUS_CODES, type IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { Subscription } from "@nats-io/transport-node";
import { WebSocket, WebSocketServer } from "ws";
import { callRpc, decodeJson } from "@paddock/bus";
import {
  CLOSE_ENDED,
  CLOSE_REVOKED,
  FILE_WATCH_LEASE_MS,
  FileWatchBatch,
  FileWatchQuery,
  ForbiddenError,
  HttpApi,
  Id,
  InvalidError,
  NotFoundError,
  PaddockError,
  pathPattern,
  watchEventsSubject,
  workspaceRpcs,
  type FileWatchFrame,
  type Session,
} from "@paddock/contracts";
import { Action, type Principal } from "../auth/auth.ts";
import type { Revocable, StreamGuard } from "../auth/revocation.ts";
import { consumeTicket } from "../auth/tokens.ts";
import { sessionResource, type GatewayContext } from "../context.ts";
import { errorResponse, parseWith, queryObject } from "../http/http.ts";
import { isAllowedOrigin } from "../http/origin.ts";
import { heldPlacement } from "./placement-hints.ts";
import { startedForUse } from "./wake.ts";

export const FILES_WATCH_ROUTE = HttpApi.watchFiles;
const WATCH_PATH = pathPattern(FILES_WATCH_ROUTE.path);
const KEEPALIVE_MS = 30_000;
/** Bytes a socket may have unsent before further changes are dropped (and one overflow frame sent once it drains). */
const MAX_BUFFERED_BYTES = 1024 * 1024;

interface WatchGrant {
  principal: Principal;
  session: Session;
  watchId: string;
  rpcs: ReturnType<typeof workspaceRpcs>;
  sub: Subscription;
}

/** One open watch socket. */
class WatchSocket implements Revocable {
  readonly tokenHash: string;
  private alive = true;
  private closed = false;
  private overflowOwed = false;
  private renewTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly ctx: GatewayContext,
    private readonly ws: WebSocket,
    private readonly grant: WatchGrant,
    private readonly onClose: (s: WatchSocket) => void,
  ) {
    this.tokenHash = grant.principal.tokenHash;
  }

  start(): void {
    this.ws.on("pong", () => (this.alive = true));
    // The client sends nothing: anything it does send is a protocol error, not input to buffer.
    this.ws.on("message", () => this.close(1003, "this socket takes no input"));
    this.ws.on("close", () => this.cleanup());
    this.ws.on("error", () => this.cleanup());
    void this.forward();
    this.renewTimer = setInterval(() => void this.renew(), Math.floor(FILE_WATCH_LEASE_MS / 3));
    this.renewTimer.unref();
  }

  private async forward(): Promise<void> {
    for await (const m of this.grant.sub) {
      const got = decodeJson(FileWatchBatch, m.data);
      if (!got.ok || got.value.watchId !== this.grant.watchId) continue;
      const batch = got.value;
      if (batch.overflow) this.overflowOwed = true;
      for (const c of batch.changes) this.send({ type: "change", path: c.path, kind: c.kind });
      if (this.overflowOwed && batch.changes.length === 0) this.send({ type: "overflow" });
      if (batch.ended) this.close(CLOSE_ENDED, "the watched path or the session went away");
    }
  }

  /** Sends a frame, or (the client reading too slowly) drops it and owes one overflow frame. */
  private send(frame: FileWatchFrame): void {
    if (this.closed || this.ws.readyState !== WebSocket.OPEN) return;
    if (this.ws.bufferedAmount > MAX_BUFFERED_BYTES) {
      this.overflowOwed = true;
      return;
    }
    if (this.overflowOwed) {
      this.overflowOwed = false;
      this.ws.send(JSON.stringify({ type: "overflow" } satisfies FileWatchFrame));
    }
    if (frame.type === "change") this.ws.send(JSON.stringify(frame));
  }

  private async renew(): Promise<void> {
    const { session, watchId, rpcs } = this.grant;
    try {
      await callRpc(
        this.ctx.deps.nc,
        rpcs.watch,
        // path is the runner's own from the start: a renewal names only the watch.
        { sessionId: session.id, workspaceId: session.workspaceId, placementGeneration: session.placementGeneration, watchId, path: "", renew: true, leaseMs: FILE_WATCH_LEASE_MS },
        { timeoutMs: this.ctx.deps.config.workspaceRpcTimeoutMs },
      );
    } catch (err) {
      // Not held any more (lease lapsed, runner restarted, session moved): changes would be missed silently.
      if (err instanceof PaddockError && err.code !== "unavailable") this.close(1011, "the runner no longer holds this watch");
    }
  }

  heartbeat(): void {
    if (!this.alive) {
      this.ws.terminate();
      this.cleanup();
      return;
    }
    this.alive = false;
    this.ws.ping();
  }

  revoke(reason: string): void {
    this.close(CLOSE_REVOKED, reason);
  }

  close(code: number, reason: string): void {
    if (!this.closed) this.ws.close(code, reason);
    this.cleanup();
  }

  private cleanup(): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.renewTimer);
    this.grant.sub.unsubscribe();
    const { session, watchId, rpcs } = this.grant;
    // Best effort: a lost request leaves a watch whose lease lapses.
    callRpc(this.ctx.deps.nc, rpcs.unwatch, { sessionId: session.id, workspaceId: session.workspaceId, placementGeneration: session.placementGeneration, watchId }, { timeoutMs: this.ctx.deps.config.workspaceRpcTimeoutMs }).catch(() => undefined);
    this.onClose(this);
  }
}

/** Serves the files watch upgrade. */
export class FilesWatchHub {
  private readonly wss: WebSocketServer;
  private readonly sockets = new Set<WatchSocket>();
  private readonly pending = new Set<Duplex>();
  private keepalive: NodeJS.Timeout | undefined;

  constructor(
    private readonly ctx: GatewayContext,
    private readonly guard: StreamGuard,
  ) {
    this.wss = new WebSocketServer({ noServer: true, maxPayload: 1024, clientTracking: false });
  }

  /** Whether an upgrade request is for this route (the terminal hub takes the rest). */
  static matches(req: IncomingMessage): boolean {
    return WATCH_PATH.test(new URL(req.url ?? "/", "http://gateway").pathname);
  }

  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    // Dead peers (no close, no FIN) would hold a runner watch forever: ping, and drop the silent.
    this.keepalive ??= setInterval(() => {
      for (const s of [...this.sockets]) s.heartbeat();
    }, KEEPALIVE_MS).unref();
    socket.on("error", () => socket.destroy());
    this.pending.add(socket);
    this.prepare(req).then(
      (grant) => {
        this.pending.delete(socket);
        if (socket.destroyed) {
          grant.sub.unsubscribe();
          return;
        }
        this.wss.handleUpgrade(req, socket, head, (ws) => {
          const s = new WatchSocket(this.ctx, ws, grant, (done) => {
            this.sockets.delete(done);
            this.guard.remove(done);
          });
          this.sockets.add(s);
          s.start();
          this.guard.add(s, grant.principal, (scope) => this.ctx.authorizer.authorize(scope, Action.readFiles, sessionResource(grant.session)));
        });
      },
      (err: unknown) => {
        this.pending.delete(socket);
        if (!(err instanceof PaddockError)) this.ctx.deps.log.error({ err }, "files watch failed");
        rejectUpgrade(socket, err);
      },
    );
  }

  private async prepare(req: IncomingMessage): Promise<WatchGrant> {
    const url = new URL(req.url ?? "/", "http://gateway");
    const m = WATCH_PATH.exec(url.pathname);
    if (!m || req.method !== FILES_WATCH_ROUTE.method) throw new NotFoundError("endpoint");
    if (!isAllowedOrigin(req, this.ctx.deps.config.allowedOrigins)) throw new ForbiddenError("origin not allowed");
    const raw = queryObject(url.searchParams);
    if ("token" in raw || "access_token" in raw) throw new InvalidError("query: never put a token in a URL: send the Authorization header, or use an attach ticket (?ticket=)");
    // From here on a token change must reach this socket: the watch runs before authentication.
    await this.guard.ready();
    let principal: Principal;
    let query: FileWatchQuery;
    if (raw.ticket !== undefined) {
      if (req.headers.authorization !== undefined) throw new InvalidError("give the Authorization header or ?ticket=, not both");
      // Validated before the ticket is spent: a typo must not burn it.
      query = parseWith(FileWatchQuery, raw, "query");
      // A ticket of either mode: reading files is allowed to any member, viewer included.
      principal = (await consumeTicket(this.ctx, raw.ticket, parseWith(Id, m[1], "session id"), undefined)).principal;
    } else {
      principal = await this.ctx.principal(req);
      query = parseWith(FileWatchQuery, raw, "query");
    }
    const found = await this.ctx.getSession(principal.scope, m[1]);
    await this.ctx.authorizer.authorize(principal.scope, Action.readFiles, sessionResource(found));
    // Its sandbox still being made: the watch begins once it runs, as a files call does.
    const session = await startedForUse(this.ctx, principal.scope, found, req.socket);
    const { poolId, runnerId, ...target } = heldPlacement(session);
    const watchId = this.ctx.deps.newId();
    const rpcs = workspaceRpcs(poolId, runnerId);
    // Subscribed (and flushed) before the runner starts: no batch is published unseen.
    const sub = this.ctx.deps.nc.subscribe(watchEventsSubject(poolId, runnerId, watchId));
    try {
      await this.ctx.deps.nc.flush();
      await callRpc(this.ctx.deps.nc, rpcs.watch, { ...target, watchId, path: query.path ?? "", renew: false, leaseMs: FILE_WATCH_LEASE_MS }, { timeoutMs: this.ctx.deps.config.workspaceRpcTimeoutMs });
    } catch (err) {
      sub.unsubscribe();
      throw err;
    }
    return { principal, session, watchId, rpcs, sub };
  }

  /** Closes every watch socket (1001) and refuses pending upgrades. */
  close(): void {
    clearInterval(this.keepalive);
    for (const s of [...this.sockets]) s.close(1001, "gateway stopping");
    for (const s of this.pending) s.destroy();
    this.wss.close();
  }
}

/** Answers a refused upgrade with a plain HTTP error response, before any WebSocket exists. */
function rejectUpgrade(socket: Duplex, err: unknown): void {
  if (socket.destroyed) return;
  const { status, body } = errorResponse(err);
  const text = JSON.stringify(body);
  socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Error"}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`);
}
