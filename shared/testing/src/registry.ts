// A real OCI registry (Debian's `docker-registry`, the CNCF distribution
// server) on loopback for image tests, and a tiny busybox image to put in it.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TarEntry } from "@paddock/oci";

export const REGISTRY_BINARY = "/usr/bin/docker-registry";
export const BUSYBOX_BINARY = "/bin/busybox";

export interface RegistryHandle {
  /** http://127.0.0.1:<port> */
  url: string;
  /** 127.0.0.1:<port>, the host part of image references. */
  host: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

/**
 * Starts docker-registry on a random free loopback port with storage in a
 * temp dir. The port is read from its "listening on" log line (it binds
 * port 0), so there is no probing and no sleep.
 */
export async function startRegistry(): Promise<RegistryHandle> {
  const dir = mkdtempSync(join(tmpdir(), "paddock-registry-"));
  const config = join(dir, "config.yml");
  writeFileSync(
    config,
    [
      "version: 0.1",
      "log: { level: info }",
      `storage: { filesystem: { rootdirectory: ${JSON.stringify(join(dir, "store"))} }, delete: { enabled: true } }`,
      'http: { addr: "127.0.0.1:0", secret: "paddock-test-registry" }',
    ].join("\n"),
  );
  const child = spawn(REGISTRY_BINARY, ["serve", config], { stdio: ["ignore", "ignore", "pipe"] });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  let stderr = "";
  const port = await new Promise<number>((resolve, reject) => {
    const onData = (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-16384);
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(stderr);
      if (m) {
        child.stderr?.off("data", onData);
        child.stderr?.resume();
        resolve(Number(m[1]));
      }
    };
    child.stderr?.on("data", onData);
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`docker-registry exited (${code}) before listening:\n${stderr}`)));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    host: `127.0.0.1:${port}`,
    process: child,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One layer with Debian's static busybox at /bin/busybox and /bin/sh linking to it. */
export function busyboxLayer(): TarEntry[] {
  return [
    { path: "bin", type: "dir" },
    { path: "bin/busybox", type: "file", mode: 0o755, content: readFileSync(BUSYBOX_BINARY) },
    { path: "bin/sh", type: "symlink", linkname: "busybox" },
    { path: "tmp", type: "dir", mode: 0o1777 },
  ];
}

export interface RegistryProxyOptions {
  /** Demand `Authorization: Bearer <token>` on /v2/ and hand it out at /token for these basic credentials. */
  bearer?: { token: string; user: string; password: string };
  /** Answer blob GETs with a 307 to this base URL + the digest (registries redirect to blob storage). */
  redirectBlobsTo?: string;
}

export interface RegistryProxy {
  url: string;
  host: string;
  /** "METHOD path" of every request that reached the upstream registry, in order. */
  forwarded: string[];
  /** Every token request's query string (service and scope). */
  tokenRequests: string[];
  stop(): Promise<void>;
}

/**
 * An HTTP proxy in front of a registry that records what it forwards and can
 * act as a registry with bearer-token auth (the WWW-Authenticate challenge of
 * Docker Hub and most registries), which docker-registry offers only with
 * JWT certificates.
 */
export async function startRegistryProxy(upstream: string, opts: RegistryProxyOptions = {}): Promise<RegistryProxy> {
  const forwarded: string[] = [];
  const tokenRequests: string[] = [];
  const up = new URL(upstream);
  let self = "";
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", self);
    if (opts.bearer && url.pathname === "/token") {
      tokenRequests.push(url.search);
      const basic = `Basic ${Buffer.from(`${opts.bearer.user}:${opts.bearer.password}`).toString("base64")}`;
      if (req.headers.authorization !== basic) return void res.writeHead(401).end();
      return void res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ token: opts.bearer.token }));
    }
    if (opts.bearer && req.headers.authorization !== `Bearer ${opts.bearer.token}`) {
      const challenge = `Bearer realm="${self}/token",service="test-registry",scope="repository:paddock:pull"`;
      return void res.writeHead(401, { "www-authenticate": challenge, "content-type": "application/json" }).end('{"errors":[{"code":"UNAUTHORIZED"}]}');
    }
    const blob = /\/blobs\/(sha256:[a-f0-9]{64})$/.exec(url.pathname);
    if (opts.redirectBlobsTo && blob && req.method === "GET") return void res.writeHead(307, { location: `${opts.redirectBlobsTo}/${blob[1]}` }).end();
    forwarded.push(`${req.method} ${url.pathname}`);
    const headers = { ...req.headers, host: up.host };
    delete headers.authorization;
    const out = httpRequest({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers }, (upRes) => {
      res.writeHead(upRes.statusCode ?? 502, upRes.headers);
      upRes.pipe(res);
    });
    out.on("error", () => res.destroy());
    req.pipe(out);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  self = `http://127.0.0.1:${port}`;
  return {
    url: self,
    host: `127.0.0.1:${port}`,
    forwarded,
    tokenRequests,
    stop: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
