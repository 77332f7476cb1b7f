import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { get as httpGet } from "node:http";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { startNatsServer, type NatsServerHandle } from "./nats-server.ts";

/** One node of a local cluster: fixed ports and store dir, so it can be killed and restarted as itself. */
export interface NatsClusterNode {
  name: string;
  port: number;
  clusterPort: number;
  url: string;
  /** Its monitoring endpoint (`/jsz` answers what this node knows of the JetStream cluster). */
  monitorUrl: string;
  storeDir: string;
  /** The running server; undefined while the node is down. */
  server: NatsServerHandle | undefined;
}

export interface NatsClusterHandle {
  nodes: NatsClusterNode[];
  /** Every node's client URL, comma-separated (what PADDOCK_NATS_URL takes). */
  urls: string;
  /** SIGKILL one node (its store dir is kept). */
  kill(index: number): Promise<void>;
  /** Starts a killed node again with the same name, ports and store dir. */
  restart(index: number): Promise<void>;
  /**
   * Resolves once the cluster serves JetStream: every running node names the
   * same meta leader, which sees every other running node current, and every
   * stream has a leader with all its replicas current (see `clusterReadiness`).
   * Throws ClusterNotReadyError with the last reason after timeoutMs.
   */
  waitForReady(timeoutMs?: number): Promise<void>;
  /** Undefined when ready now, else why not (one look, no waiting). */
  readiness(): Promise<string | undefined>;
  /** Stops every node; removes the store dirs unless keepStore. */
  stop(opts?: { keepStore?: boolean }): Promise<void>;
}

export interface NatsClusterOptions {
  /** Nodes (3 by default). */
  size?: number;
  /** Config text appended to every node's config. */
  extraConfig?: string;
  /** Where the nodes' store dirs go (a fresh temp dir by default). */
  dir?: string;
}

/** Whether a TCP port on 127.0.0.1 can be bound right now. */
function bindable(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => resolve(undefined));
    srv.listen(port, "127.0.0.1", () => {
      const addr = srv.address();
      const bound = typeof addr === "object" && addr ? addr.port : undefined;
      srv.close(() => resolve(bound));
    });
  });
}

/**
 * A free TCP port on 127.0.0.1 for a listener that must keep its port across
 * restarts. Drawn below the kernel's ephemeral range, so an outgoing
 * connection cannot take it between this check and the listen (a port from
 * `listen(0)` can be handed out again as a client's source port).
 */
export async function freePort(): Promise<number> {
  let low = 32768;
  try {
    low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]) || low;
  } catch {
    // not Linux: keep the usual default
  }
  for (let i = 0; i < 200; i++) {
    const candidate = 10_000 + Math.floor(Math.random() * Math.max(1, low - 10_000));
    const port = await bindable(candidate);
    if (port !== undefined) return port;
  }
  const any = await bindable(0);
  if (any === undefined) throw new Error("no free port");
  return any;
}

/**
 * Starts a local JetStream cluster (deploy/nats/cluster-*.conf in miniature):
 * each node on its own random client and route ports with its own store dir,
 * routes to every node. Ports are fixed for the cluster's life so a killed
 * node restarts as itself and clients keep one URL list.
 */
export async function startNatsCluster(opts: NatsClusterOptions = {}): Promise<NatsClusterHandle> {
  const size = opts.size ?? 3;
  const root = opts.dir ?? mkdtempSync(join(tmpdir(), "paddock-cluster-"));
  const nodes: NatsClusterNode[] = [];
  for (let i = 0; i < size; i++) {
    const port = await freePort();
    const clusterPort = await freePort();
    const monitorPort = await freePort();
    nodes.push({
      name: `n${i + 1}`,
      port,
      clusterPort,
      url: `nats://127.0.0.1:${port}`,
      monitorUrl: `http://127.0.0.1:${monitorPort}`,
      storeDir: join(root, `n${i + 1}`),
      server: undefined,
    });
  }
  const routes = nodes.map((n) => `nats-route://127.0.0.1:${n.clusterPort}`).join("\n    ");
  const configOf = (n: NatsClusterNode) =>
    [
      `server_name: ${n.name}`,
      `http: "${new URL(n.monitorUrl).host}"`,
      `cluster {`,
      `  name: paddock-test`,
      `  listen: "127.0.0.1:${n.clusterPort}"`,
      `  routes: [\n    ${routes}\n  ]`,
      `}`,
      opts.extraConfig ?? "",
    ].join("\n");
  const startNode = async (n: NatsClusterNode) => {
    n.server = await startNatsServer({ port: n.port, storeDir: n.storeDir, extraConfig: configOf(n) });
  };
  const urls = nodes.map((n) => n.url).join(",");
  const stop = async (stopOpts: { keepStore?: boolean } = {}) => {
    await Promise.all(
      nodes.map(async (n) => {
        await n.server?.stop({ keepStore: true });
      }),
    );
    for (const n of nodes) n.server = undefined;
    if (!stopOpts.keepStore) rmSync(root, { recursive: true, force: true });
  };
  const nodeAt = (index: number): NatsClusterNode => {
    const n = nodes[index];
    if (!n) throw new Error(`no cluster node ${index}`);
    return n;
  };
  const handle: NatsClusterHandle = {
    nodes,
    urls,
    kill: async (index) => {
      const n = nodeAt(index);
      await n.server?.kill();
      n.server = undefined;
    },
    restart: async (index) => {
      const n = nodeAt(index);
      if (n.server) throw new Error(`${n.name} is running`);
      await startNode(n);
    },
    waitForReady: (timeoutMs = 60_000) => waitForReady(nodes, urls, timeoutMs),
    readiness: () => withConnection(urls, (nc) => clusterReadiness(nodes, nc)),
    stop,
  };
  try {
    await Promise.all(nodes.map(startNode));
    await handle.waitForReady();
    return handle;
  } catch (err) {
    await stop();
    throw err;
  }
}

/** The cluster did not become ready in time: a harness failure, not a finding about the system. */
export class ClusterNotReadyError extends Error {
  readonly code = "cluster_not_ready";
  constructor(timeoutMs: number, reason: string) {
    super(`the NATS cluster was not ready within ${timeoutMs} ms: ${reason}`);
  }
}

export interface MetaCluster {
  leader?: string;
  replicas?: Array<{ name: string; current?: boolean; offline?: boolean }>;
}

/**
 * What one node's `/jsz` says of the meta group; undefined when it does not
 * answer. node:http, not fetch: fetch refuses some ports (10080, ...) freePort may draw.
 */
export function metaOf(n: NatsClusterNode): Promise<MetaCluster | undefined> {
  return new Promise((resolve) => {
    const req = httpGet(`${n.monitorUrl}/jsz`, { timeout: 2_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => {
        try {
          resolve(res.statusCode === 200 ? ((JSON.parse(body) as { meta_cluster?: MetaCluster }).meta_cluster ?? {}) : undefined);
        } catch {
          resolve(undefined);
        }
      });
      res.on("error", () => resolve(undefined));
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve(undefined));
  });
}

/**
 * Why the cluster cannot serve JetStream now, from the servers' own answers;
 * undefined when it can. Meta group: every running node's `/jsz` names the
 * same leader, a running node, and the leader sees every other running node
 * current. Streams: every stream (names from the meta leader) answers its info
 * from a leader, with as many replicas as configured, all current and online.
 */
export async function clusterReadiness(nodes: readonly NatsClusterNode[], nc: NatsConnection): Promise<string | undefined> {
  const running = nodes.filter((n) => n.server !== undefined);
  const metas = await Promise.all(running.map(metaOf));
  const leaders = new Set(metas.map((m) => m?.leader ?? ""));
  const leader = [...leaders][0] ?? "";
  if (leaders.size !== 1 || leader === "") return `meta leader: ${running.map((n, i) => `${n.name}→${metas[i]?.leader || "none"}`).join(" ")}`;
  const leaderIndex = running.findIndex((n) => n.name === leader);
  if (leaderIndex < 0) return `meta leader ${leader} is not running`;
  const peers = metas[leaderIndex]?.replicas ?? [];
  for (const n of running) {
    if (n.name === leader) continue;
    const peer = peers.find((r) => r.name === n.name);
    if (!peer?.current || peer.offline) return `meta peer ${n.name} not current`;
  }
  try {
    // Paged by 1,024 names; a test cluster holds a few dozen streams.
    const { streams } = await jsApi<{ streams?: string[] | null }>(nc, "$JS.API.STREAM.NAMES", {});
    for (const name of streams ?? []) {
      const info = await jsApi<StreamInfoAnswer>(nc, `$JS.API.STREAM.INFO.${name}`);
      const cluster = info.cluster;
      if (!cluster?.leader) return `stream ${name}: no leader`;
      const replicas = cluster.replicas ?? [];
      const wanted = info.config?.num_replicas ?? 1;
      if (replicas.length + 1 < wanted) return `stream ${name}: ${replicas.length + 1} of ${wanted} replicas`;
      const behind = replicas.find((r) => !r.current || r.offline);
      if (behind) return `stream ${name}: replica ${behind.name} not current`;
    }
  } catch (err) {
    return `JetStream API: ${err instanceof Error ? err.message : String(err)}`;
  }
  return undefined;
}

interface StreamInfoAnswer {
  config?: { num_replicas?: number };
  cluster?: { leader?: string; replicas?: Array<{ name: string; current?: boolean; offline?: boolean }> };
}

/** One JetStream API request (JSON both ways); an error answer or no responder throws. */
async function jsApi<T>(nc: NatsConnection, subject: string, body?: unknown): Promise<T> {
  const reply = await nc.request(subject, body === undefined ? new Uint8Array(0) : JSON.stringify(body), { timeout: 2_000 });
  const answer = JSON.parse(new TextDecoder().decode(reply.data)) as T & { error?: { description?: string } };
  if (answer.error) throw new Error(answer.error.description ?? "error");
  return answer;
}

async function withConnection<T>(urls: string, fn: (nc: NatsConnection) => Promise<T>): Promise<T> {
  const nc = await connect({ servers: urls.split(","), maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  try {
    return await fn(nc);
  } finally {
    await nc.close();
  }
}

/** Asks `clusterReadiness` every 200 ms (the servers' answers, not a guess at how long an election takes). */
async function waitForReady(nodes: readonly NatsClusterNode[], urls: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  await withConnection(urls, async (nc) => {
    let reason: string | undefined = "not asked";
    while (Date.now() < deadline) {
      reason = await clusterReadiness(nodes, nc);
      if (reason === undefined) return;
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new ClusterNotReadyError(timeoutMs, reason ?? "unknown");
  });
}
