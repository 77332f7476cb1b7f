/**
 * Egress: the per-session proxy of the process backend.
 *
 * A session's resolved spec carries `egressAllow`: the hosts its apps may
 * reach (the environment's list extended by the session's). For the process
 * backend the runner enforces it with one HTTP proxy per session, listening
 * on 127.0.0.1 on an ephemeral port, started before setup and stopped when
 * the session ends (destroy, cold suspend, run-mode exit, failed boot,
 * discard, agent shutdown). Setup, init and the apps get
 * HTTP_PROXY/HTTPS_PROXY/http_proxy/https_proxy/ALL_PROXY pointing at it and
 * an empty NO_PROXY.
 *
 * The proxy understands two request forms:
 * - CONNECT host:port — a TCP tunnel (HTTPS, or any TCP protocol a client
 *   tunnels); the proxy never sees inside it.
 * - Absolute-URI HTTP (`GET http://host:port/path`) — forwarded to the host
 *   with hop-by-hop headers removed and Host set to the URI's authority.
 * Anything else (origin-form requests, other schemes) is answered 400.
 *
 * Matching is by host NAME as the client wrote it, never by resolved address:
 * an entry matches the host exactly (case-insensitive, a trailing dot
 * ignored), and `*.example.com` matches every subdomain of example.com (not
 * example.com itself). Any port. An IP literal is reachable only if listed
 * as that literal. An empty list refuses everything. A refused request is
 * answered 403, counted in `paddock_egress_refused_total` (by form, never by
 * host: host names are unbounded and the session's own), and logged at debug
 * with the host name only. Request and response bodies, paths and headers
 * are never logged.
 *
 * Network use: the bytes crossing the proxy's sandbox-facing connections
 * (`bytes()`) are the session's `networkBytes` for the placement generation
 * (usage.ts); traffic that bypasses the proxy (below) is not measured.
 *
 * Limits of the process backend: the apps are ordinary processes in the
 * runner's network namespace. Nothing stops one from ignoring the proxy
 * variables and opening sockets directly (raw TCP, UDP, DNS, or a client
 * that does not honor HTTP_PROXY — Node's built-in fetch, for one). The
 * proxy is the enforcement point for cooperating clients only; it is not a
 * sandbox boundary. Nor does it stop an allowed name from resolving to an
 * internal address (DNS is the upstream's), so an allowlist should name
 * public hosts. Real isolation needs the sandbox's own network: a docker
 * backend would attach the container to an internal network whose only
 * reachable peer is this proxy (no default route, no other egress), so that
 * every connection has to pass the allowlist; a namespace-based process
 * backend could do the same with a veth pair into a netns.
 */
import { createServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { connect as netConnect, isIP, type AddressInfo, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { Counter, type Registry } from "prom-client";
import type { Logger } from "@paddock/logging";

const REFUSED_METRIC = "paddock_egress_refused_total";
/** How long an upstream may take to accept a connection. */
const UPSTREAM_CONNECT_TIMEOUT_MS = 10_000;

/** Hop-by-hop headers (RFC 9110 §7.6.1) and the proxy's own; never forwarded. */
const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te", "trailer", "transfer-encoding", "upgrade"]);

export type EgressForm = "connect" | "http";

/** Refused egress requests, by form; registered once per registry (each session's proxy shares it). */
export function egressRefusals(registry: Registry): Counter<"form"> {
  const existing = registry.getSingleMetric(REFUSED_METRIC);
  if (existing) return existing as Counter<"form">;
  return new Counter({
    name: REFUSED_METRIC,
    help: "Session egress requests refused by the runner's proxy (host not in egressAllow, or a malformed request)",
    labelNames: ["form"],
    registers: [registry],
  });
}

function normalizeHost(host: string): string {
  let h = host.trim().toLowerCase();
  if (h.startsWith("[") && h.endsWith("]")) h = h.slice(1, -1);
  while (h.endsWith(".")) h = h.slice(0, -1);
  return h;
}

/** Whether host (a name or IP literal, no port) is allowed by the list: exact match, or `*.suffix` for subdomains. */
export function hostAllowed(allow: readonly string[], host: string): boolean {
  const h = normalizeHost(host);
  if (h === "") return false;
  for (const entry of allow) {
    const e = normalizeHost(entry);
    if (e.startsWith("*.")) {
      const suffix = e.slice(1); // ".example.com"
      if (suffix.length > 1 && h.length > suffix.length && h.endsWith(suffix) && isIP(h) === 0) return true;
    } else if (e !== "" && e === h) {
      return true;
    }
  }
  return false;
}

/** The proxy variables an app gets (both cases: curl reads only lowercase http_proxy). */
export function egressEnv(proxyUrl: string): Record<string, string> {
  return {
    HTTP_PROXY: proxyUrl,
    HTTPS_PROXY: proxyUrl,
    http_proxy: proxyUrl,
    https_proxy: proxyUrl,
    ALL_PROXY: proxyUrl,
    all_proxy: proxyUrl,
    NO_PROXY: "",
    no_proxy: "",
  };
}

export interface EgressProxyOptions {
  allow: readonly string[];
  log: Logger;
  refused: Counter<"form">;
  /** Fields added to the debug log of a refusal (session ids). */
  logFields?: Record<string, unknown>;
  /** The address to listen on (127.0.0.1 when absent; a bwrap session's link address, where only it can reach the proxy). */
  host?: string;
  /** The port to listen on when free (a bwrap session's link lets it through without a rule of its own); any port otherwise. */
  port?: number;
}

export interface EgressProxy {
  /** `http://<host>:<port>` */
  readonly url: string;
  readonly port: number;
  /**
   * Bytes that crossed the proxy's sandbox-facing sockets so far, both ways
   * (requests, responses, tunnels, headers included); still answers after close.
   */
  bytes(): number;
  /** Stops listening and cuts every connection, tunnels included. Idempotent. */
  close(): Promise<void>;
}

/** Splits a CONNECT target `host:port` / `[v6]:port`; undefined when malformed. */
function parseAuthority(target: string): { host: string; port: number } | undefined {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]/\s@]+):(\d{1,5})$/.exec(target);
  if (!m) return undefined;
  const port = Number(m[2]);
  if (port < 1 || port > 65_535) return undefined;
  return { host: normalizeHost(m[1] ?? ""), port };
}

function forwardHeaders(headers: IncomingHttpHeaders, authority: string): IncomingHttpHeaders {
  const listed = new Set(
    String(headers.connection ?? "")
      .split(",")
      .map((s) => s.trim().toLowerCase())
      .filter((s) => s !== ""),
  );
  const out: IncomingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (HOP_BY_HOP.has(name) || listed.has(name) || value === undefined) continue;
    out[name] = value;
  }
  out.host = authority;
  return out;
}

/** Starts a session's proxy on 127.0.0.1 with an ephemeral port. */
export async function startEgressProxy(opts: EgressProxyOptions): Promise<EgressProxy> {
  const host = opts.host ?? "127.0.0.1";
  const allow = [...opts.allow];
  const sockets = new Set<Duplex>();
  const track = (s: Duplex) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  };

  const refuse = (form: EgressForm, host: string | undefined) => {
    opts.refused.inc({ form });
    opts.log.debug({ ...opts.logFields, form, host: host?.slice(0, 253) }, "egress refused");
  };

  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    let url: URL | undefined;
    try {
      url = /^http:\/\//i.test(req.url ?? "") ? new URL(req.url ?? "") : undefined;
    } catch {
      url = undefined;
    }
    if (!url || url.username !== "" || url.password !== "") {
      refuse("http", undefined);
      res.writeHead(400, { "content-type": "text/plain", connection: "close" }).end("egress proxy: absolute http:// URI or CONNECT expected\n");
      return;
    }
    const host = normalizeHost(url.hostname);
    if (!hostAllowed(allow, host)) {
      refuse("http", host);
      req.resume();
      res.writeHead(403, { "content-type": "text/plain", connection: "close" }).end("egress proxy: host not in egressAllow\n");
      return;
    }
    const upstream = httpRequest({
      host,
      port: url.port === "" ? 80 : Number(url.port),
      method: req.method,
      path: `${url.pathname}${url.search}`,
      headers: forwardHeaders(req.headers, url.host),
      timeout: UPSTREAM_CONNECT_TIMEOUT_MS,
    });
    upstream.on("response", (up) => {
      const headers = forwardHeaders(up.headers, url.host);
      delete headers.host;
      res.writeHead(up.statusCode ?? 502, up.statusMessage, headers);
      up.pipe(res);
    });
    upstream.on("timeout", () => upstream.destroy(new Error("upstream timeout")));
    upstream.on("error", () => {
      if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain", connection: "close" }).end("egress proxy: upstream unreachable\n");
      else res.destroy();
    });
    req.pipe(upstream);
  };

  const onConnect = (req: IncomingMessage, client: Duplex, head: Buffer) => {
    track(client);
    client.on("error", () => client.destroy());
    const target = parseAuthority(req.url ?? "");
    if (!target || !hostAllowed(allow, target.host)) {
      refuse("connect", target?.host);
      client.end(target ? "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" : "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
      return;
    }
    const upstream: Socket = netConnect({ host: target.host, port: target.port, autoSelectFamily: true, timeout: UPSTREAM_CONNECT_TIMEOUT_MS });
    track(upstream);
    let connected = false;
    upstream.once("connect", () => {
      connected = true;
      upstream.setTimeout(0);
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.once("timeout", () => upstream.destroy());
    upstream.on("error", () => {
      if (!connected) client.end("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
      else client.destroy();
    });
    upstream.once("close", () => client.destroy());
    client.once("close", () => upstream.destroy());
  };

  // Network use is measured where the sandbox meets the proxy: every connection an app opens here.
  const clients = new Set<Socket>();
  let closedBytes = 0;
  const measure = (socket: Socket) => {
    clients.add(socket);
    socket.once("close", () => {
      clients.delete(socket);
      closedBytes += socket.bytesRead + socket.bytesWritten;
    });
  };

  const server: Server = createServer(onRequest);
  server.on("connect", onConnect);
  server.on("connection", track);
  server.on("connection", measure);
  server.on("clientError", (_err, socket) => socket.destroy());

  await listenOn(server, opts.port ?? 0, host).catch((err: NodeJS.ErrnoException) => {
    // Something else of the host holds the preferred port: any port does (the caller allows it).
    if (err.code === "EADDRINUSE" && opts.port) return listenOn(server, 0, host);
    throw err;
  });
  const port = (server.address() as AddressInfo).port;
  let closed: Promise<void> | undefined;
  return {
    url: `http://${host}:${port}`,
    port,
    bytes: () => [...clients].reduce((n, c) => n + c.bytesRead + c.bytesWritten, closedBytes),
    close: () =>
      (closed ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
        server.closeAllConnections();
      })),
  };
}

function listenOn(server: Server, port: number, host: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
}
