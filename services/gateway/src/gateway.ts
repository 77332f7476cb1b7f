import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { HealthRoutes, NotFoundError, PaddockError, routeName, TooLargeError } from "@paddock/contracts";
import { openApiDocument } from "@paddock/contracts/openapi";
import { ConnectionGate } from "./http/connections.ts";
import { ConsoleAssets } from "./http/console-assets.ts";
import { refuseForeignOrigin } from "./http/origin.ts";
import { GracefulClose } from "./http/graceful-close.ts";
import { GatewayContext, type GatewayDeps } from "./context.ts";
import { environmentRoutes } from "./routes/environments.ts";
import { eventRoutes } from "./routes/events.ts";
import { matchRoute, sendError, sendJson, type Route } from "./http/http.ts";
import { lifecycleRoutes } from "./routes/lifecycle.ts";
import { RateLimitedError } from "./http/limits.ts";
import { runnerRoutes } from "./routes/runners.ts";
import { secretRoutes } from "./routes/secrets.ts";
import { webhookRoutes } from "./routes/webhooks.ts";
import { memberRoutes } from "./auth/members.ts";
import { sessionMetricsRoutes } from "./routes/session-metrics.ts";
import { sessionRoutes } from "./routes/sessions.ts";
import { tokenRoutes } from "./auth/tokens.ts";
import { oidcRoutes } from "./auth/oidc-routes.ts";
import { rejectUpgrade, TerminalHub, TERMINAL_ROUTE } from "./terminal/terminal.ts";
import { workspaceRoutes } from "./routes/workspace.ts";
import { fileRoutes } from "./routes/files.ts";
import { execRoutes } from "./routes/exec.ts";
import { agentRoutes } from "./routes/agents.ts";
import { FILES_WATCH_ROUTE, FilesWatchHub } from "./routes/files-watch.ts";
import { DataPlaneDialer } from "./routes/data-plane.ts";
import { PreviewProxy } from "./routes/preview.ts";
import { matchPreview, matchPreviewHost, previewHostsOf } from "./routes/preview-match.ts";
import { PreviewAccess } from "./routes/preview-access.ts";
import { wakeForUse } from "./routes/wake.ts";
import { runnerJoin } from "./runner-join/join-routes.ts";

export interface Gateway {
  /** Binds the public API; resolves with the bound port (useful with port 0). */
  listen(port?: number, host?: string): Promise<{ port: number }>;
  /** Connected to NATS and listening. */
  isReady(): boolean;
  /** Closes terminal sockets and the HTTP server; the caller drains NATS. */
  close(): Promise<void>;
  readonly server: Server;
  readonly terminals: TerminalHub;
  /** Every route this gateway serves (`GET /v1/sessions/:id`), the terminal upgrade and the probes included. */
  readonly served: readonly string[];
}

/**
 * Builds the public edge: the /v1 HTTP API and the terminal WebSocket. Pure
 * construction (no I/O until listen), so tests build one per case.
 */
/** How long an idle keep-alive connection is kept (advertised as Keep-Alive: timeout=65). */
const KEEP_ALIVE_TIMEOUT_MS = 65_000;
/** How long a closing gateway lets requests in flight finish before cutting them (long polls and streams are cut; their clients retry). */
const SHUTDOWN_GRACE_MS = 10_000;

export function createGateway(deps: GatewayDeps): Gateway {
  const ctx = new GatewayContext(deps);
  const terminals = new TerminalHub(ctx, (scope, session, closer) => wakeForUse(ctx, scope, session, closer));
  const fileWatches = new FilesWatchHub(ctx, terminals.guard);
  const previewAccess = new PreviewAccess(ctx);
  const dialer = new DataPlaneDialer(deps.now, deps.log);
  const previews = new PreviewProxy(ctx, previewAccess, dialer);
  const join = runnerJoin(ctx);
  // Followed events and exec streams live by their token and access like terminal sockets: one guard for all.
  const routes: Route[] = [...join.routes, ...sessionRoutes(ctx), ...lifecycleRoutes(ctx), ...environmentRoutes(ctx), ...runnerRoutes(ctx, terminals.guard), ...eventRoutes(ctx, terminals.guard), ...workspaceRoutes(ctx), ...fileRoutes(ctx, dialer), ...execRoutes(ctx, terminals.guard), ...agentRoutes(ctx), ...tokenRoutes(ctx, terminals.guard), ...secretRoutes(ctx), ...webhookRoutes(ctx), ...memberRoutes(ctx), ...oidcRoutes(ctx), ...sessionMetricsRoutes(ctx), ...previewAccess.routes()];
  const { log, metrics, nc } = deps;
  let listening = false;
  const isReady = () => listening && !nc.isClosed();
  const previewHosts = previewHostsOf(deps.config.previewOrigin);
  // The web console's files, read when the gateway starts listening (construction does no I/O).
  const consoleAssets = new ConsoleAssets(deps.config.consoleDir);
  /** The preview a request names: by host first (a preview host's every path is its app's, none the gateway's), then by path. */
  const previewOf = (req: IncomingMessage) => {
    const byHost = matchPreviewHost(previewHosts, req.headers.host, req.url ?? "/");
    if (byHost === "unknown") throw new NotFoundError("preview host");
    return byHost === "none" ? matchPreview(req.url ?? "/") : byHost;
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const started = process.hrtime.bigint();
    const reqId = deps.newId();
    const url = new URL(req.url ?? "/", "http://gateway");
    const method = req.method ?? "GET";
    let routeName = "unmatched";
    try {
      const preview = previewOf(req);
      if (preview) {
        routeName = "preview";
        await previews.handle(req, res, preview);
        return;
      }
      if (url.pathname === HealthRoutes.healthz.path && method === HealthRoutes.healthz.method) {
        sendJson(res, 200, { status: "ok" });
        return;
      }
      if (url.pathname === HealthRoutes.readyz.path && method === HealthRoutes.readyz.method) {
        const ready = isReady();
        sendJson(res, ready ? 200 : 503, { status: ready ? "ready" : "not_ready" });
        return;
      }
      if (url.pathname === HealthRoutes.openapi.path && method === HealthRoutes.openapi.method) {
        routeName = "openapi";
        sendOpenApi(res);
        return;
      }
      // A browser call from another page's origin changes nothing: refused before it is authenticated or read.
      if (url.pathname.startsWith("/v1/")) refuseForeignOrigin(req, deps.config.allowedOrigins);
      const match = matchRoute(routes, method, url.pathname);
      if (match.kind === "none") {
        // The console by the exact request path (not the normalized URL): a path with `..` or escapes is no file.
        if (!url.pathname.startsWith("/v1/") && consoleAssets.serve(req, res, (req.url ?? "/").split("?")[0] ?? "/")) {
          routeName = "console";
          return;
        }
        throw new NotFoundError("endpoint");
      }
      if (match.kind === "method_not_allowed") {
        // 405 with the `invalid` code: the path exists, the method does not.
        routeName = "method_not_allowed";
        sendJson(res, 405, { error: { code: "invalid", message: `method ${method} not allowed` } }, { allow: match.allow.join(", ") });
        return;
      }
      routeName = match.route.name;
      await match.route.handler({ req, res, params: match.params, query: url.searchParams });
    } catch (err) {
      if (!(err instanceof PaddockError)) log.error({ err, reqId, route: routeName }, "request failed");
      // A body we may not have read to the end: close the connection rather than reuse it.
      sendError(res, err, err instanceof TooLargeError ? { connection: "close" } : err instanceof RateLimitedError ? { "retry-after": String(err.retryAfterS) } : {});
    } finally {
      metrics.httpRequests.inc({ route: routeName, status: String(res.statusCode) });
      log.debug(
        { reqId, method, route: routeName, status: res.statusCode, ms: Number(process.hrtime.bigint() - started) / 1e6 },
        "request",
      );
    }
  };

  const { httpHeadersTimeoutMs: headersTimeout } = deps.config;
  const server = createServer(
    {
      headersTimeout,
      requestTimeout: Math.max(60_000, headersTimeout),
      // Idle keep-alive sockets are closed by the client before the gateway closes them: clients close at the
      // advertised timeout less a second (undici), so a short one (Node's 5 s) makes a reused socket race the
      // server's close under load ("other side closed" on a request the client already sent).
      keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
      // Node checks both timeouts only this often (30 s by default): a slow-header socket would outlive its timeout by that much.
      connectionsCheckingInterval: Math.max(10, Math.min(1_000, Math.floor(headersTimeout / 4))),
    },
    (req, res) => {
      graceful.track(req, res);
      if (gate.isRefused(req.socket)) {
        req.socket.destroy();
        return;
      }
      handle(req, res).catch((err: unknown) => {
        log.error({ err }, "request handler crashed");
        res.destroy();
      });
    },
  );
  const graceful = new GracefulClose(server);
  const gate = new ConnectionGate(
    { maxConnections: deps.config.httpMaxConnections, maxConnectionsPerAddress: deps.config.httpMaxConnectionsPerAddress },
    (reason) => metrics.connectionsRefused.inc({ reason }),
  );
  gate.attach(server);
  server.on("upgrade", (req, socket, head) => {
    let preview: ReturnType<typeof previewOf>;
    try {
      preview = previewOf(req);
    } catch (err) {
      rejectUpgrade(socket, err);
      return;
    }
    if (gate.isRefused(req.socket)) socket.destroy();
    else if (preview) void previews.handleUpgrade(req, socket, head, preview);
    else if (FilesWatchHub.matches(req)) fileWatches.handleUpgrade(req, socket, head);
    else terminals.handleUpgrade(req, socket, head);
  });
  server.on("clientError", (err: NodeJS.ErrnoException, socket) => {
    // Headers (or a request) not complete within the timeout: a slow client, told so.
    const status = err.code === "ERR_HTTP_REQUEST_TIMEOUT" ? "408 Request Timeout" : err.code === "HPE_HEADER_OVERFLOW" ? "431 Request Header Fields Too Large" : "400 Bad Request";
    if (socket.writable) socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\n\r\n`);
    else socket.destroy();
  });

  const served = [...routes.map((r) => r.name), routeName(TERMINAL_ROUTE), routeName(FILES_WATCH_ROUTE), ...Object.values(HealthRoutes).map(routeName)];
  return {
    server,
    terminals,
    served,
    isReady,
    listen: async (port = deps.config.httpPort, host = deps.config.httpHost) => {
      // The auth callout answers nats-server from here on (joined runners can connect).
      join.start();
      const loaded = await consoleAssets.load();
      if (loaded.kind === "loaded") log.info({ files: loaded.files, bytes: loaded.bytes }, "console loaded");
      else log.warn({ reason: loaded.reason }, "console not built: `/` answers 503 (npm run build:console)");
      return new Promise((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, host, () => {
          server.off("error", reject);
          listening = true;
          resolve({ port: (server.address() as AddressInfo).port });
        });
      });
    },
    close: async () => {
      listening = false;
      terminals.close();
      previews.stop();
      fileWatches.close();
      // New connections are refused from here; what is in flight is answered (GracefulClose).
      const pending = graceful.pending;
      const { forced } = await graceful.close(SHUTDOWN_GRACE_MS);
      log.info({ pending, forced }, "http server closed");
      await join.stop();
    },
  };
}

/** The API's OpenAPI description, rendered once (it only changes with the code). */
let openApiBody: Buffer | undefined;
function sendOpenApi(res: ServerResponse): void {
  openApiBody ??= Buffer.from(JSON.stringify(openApiDocument()));
  res.writeHead(200, { "content-type": "application/json; charset=utf-8", "content-length": openApiBody.length, "cache-control": "no-cache" });
  res.end(openApiBody);
}
