import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { startNatsServer, type NatsServerHandle } from "./nats-server.ts";

/** One node of a local cluster: fixed ports and store dir, so it can be killed and restarted as itself. */
export interface NatsClusterNode {
  name: string;
  port: number;
  clusterPort: number;
  url: string;
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
  /** Resolves once JetStream answers through the given URLs (a meta leader exists). */
  waitForJetStream(timeoutMs?: number): Promise<void>;
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
    nodes.push({ name: `n${i + 1}`, port, clusterPort, url: `nats://127.0.0.1:${port}`, storeDir: join(root, `n${i + 1}`), server: undefined });
  }
  const routes = nodes.map((n) => `nats-route://127.0.0.1:${n.clusterPort}`).join("\n    ");
  const configOf = (n: NatsClusterNode) =>
    [
      `server_name: ${n.name}`,
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
    waitForJetStream: (timeoutMs = 30_000) => waitForJetStream(urls, timeoutMs),
    stop,
  };
  try {
    await Promise.all(nodes.map(startNode));
    await handle.waitForJetStream();
    return handle;
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Polls JetStream account info (`$JS.API.INFO`) until it answers without an error (the meta group has a leader). */
async function waitForJetStream(urls: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const nc = await connect({ servers: urls.split(","), maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  let last = "";
  try {
    while (Date.now() < deadline) {
      try {
        const reply = await nc.request("$JS.API.INFO", new Uint8Array(0), { timeout: 2_000 });
        const body = JSON.parse(new TextDecoder().decode(reply.data)) as { error?: { description?: string } };
        if (!body.error) return;
        last = body.error.description ?? "error";
      } catch (err) {
        last = err instanceof Error ? err.message : String(err);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`JetStream did not become available within ${timeoutMs} ms: ${last}`);
  } finally {
    await nc.close();
  }
}
