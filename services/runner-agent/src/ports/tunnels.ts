import type { Duplex } from "node:stream";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { serveRpc, TunnelStream, type BusMetrics } from "@paddock/bus";
import { PortUnreachableError, TUNNEL_PING_MS, UnavailableError, tunnelInSubject, tunnelOutSubject, workspaceRpcs, type HeldSession } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { DataPlane } from "./data-plane.ts";

/** A held session as a preview reaches it (a SessionRuntime is one). */
export interface HeldPorts {
  readonly held: HeldSession;
  /** A connection to a declared port of the running session; not_found for an undeclared one (or a private one, publicOnly), unavailable when nothing listens. */
  connectPort(port: number, publicOnly?: boolean): Promise<Duplex>;
}

/** Tunnels one runner carries at once, past which an open is refused (503) unless an idle kept one can go. */
export const MAX_TUNNELS_PER_RUNNER = 1_024;
/** A data-plane connection without bytes this long may be closed to make room (a gateway's kept connection between requests). */
export const IDLE_EVICT_MS = 1_000;

export interface TunnelsDeps {
  nc: NatsConnection;
  poolId: string;
  runnerId: string;
  /** The held session a request names, at its placement generation (conflict otherwise). */
  held: (t: { sessionId: string; workspaceId: string; placementGeneration: number }) => HeldPorts;
  translate: <T>(fn: () => Promise<T>) => Promise<T>;
  every: (ms: number, fn: () => void) => () => void;
  /** A preview is the session's activity (the idle policy's input): told at the open and every ping period while it lasts. */
  onActivity: (sessionId: string) => void;
  /** MAX_TUNNELS_PER_RUNNER when absent (tests set a small one). */
  maxTunnels?: number;
  /** Where `via: "data"` tunnels go (absent: every tunnel goes on the bus). */
  dataPlane?: DataPlane;
  metrics: BusMetrics;
  log: Logger;
}

/**
 * Serves the `tunnel` rpc: connects to the port (inside the session's
 * network namespace on bwrap) and carries the connection over a tunnel whose
 * input arrives on `tunnel-in.<id>` and whose output goes to `tunnel-out.<id>`
 * under this runner's own subjects. Either side ending or breaking ends both.
 */
export function serveTunnels(deps: TunnelsDeps): { subs: Subscription[]; stop(): void } {
  const tunnels = new Map<string, TunnelStream>();
  const rpcs = workspaceRpcs(deps.poolId, deps.runnerId);
  const input = deps.nc.subscribe(tunnelInSubject(deps.poolId, deps.runnerId, "*"), {
    callback: (err, msg) => {
      if (err) return;
      const id = msg.subject.slice(msg.subject.lastIndexOf(".") + 1);
      tunnels.get(id)?.receive(msg);
    },
  });
  const open = serveRpc(
    deps.nc,
    rpcs.tunnel,
    (req) =>
      deps.translate(async () => {
        const carried = tunnels.size + (deps.dataPlane?.size ?? 0);
        const full = carried >= (deps.maxTunnels ?? MAX_TUNNELS_PER_RUNNER) && !deps.dataPlane?.evictIdle(IDLE_EVICT_MS);
        if (full || tunnels.has(req.tunnelId)) throw new UnavailableError(`this runner carries ${carried} tunnels already; retry`);
        // Asked for, even before its app listens (a woken session's app starting): the session is in use.
        deps.onActivity(req.sessionId);
        let conn: Duplex;
        try {
          conn = await deps.held(req).connectPort(req.port, req.publicOnly);
        } catch (err) {
          if (err instanceof PortUnreachableError) return { tunnelId: req.tunnelId, connected: false };
          throw err;
        }
        if (req.via === "data" && deps.dataPlane) {
          const data = deps.dataPlane.offer(conn, req.sessionId);
          if (data) return { tunnelId: req.tunnelId, connected: true, data };
        }
        const tunnel = new TunnelStream({ nc: deps.nc, sendTo: tunnelOutSubject(deps.poolId, deps.runnerId, req.tunnelId), every: deps.every, pingMs: TUNNEL_PING_MS });
        tunnels.set(req.tunnelId, tunnel);
        const stopActivity = deps.every(TUNNEL_PING_MS, () => deps.onActivity(req.sessionId));
        // Either side's error ends both at once (the tunnel tells the gateway: abort). The app closing
        // its connection ends the tunnel's output cleanly; the tunnel closing (both directions done,
        // or the gateway gone) lets go of the connection.
        const end = () => {
          stopActivity();
          tunnels.delete(req.tunnelId);
          tunnel.destroy();
          conn.destroy();
        };
        conn.pipe(tunnel);
        tunnel.pipe(conn);
        conn.on("error", end);
        tunnel.on("error", end).once("close", end);
        conn.once("close", () => {
          if (!tunnel.writableEnded) tunnel.end();
        });
        deps.log.debug({ sessionId: req.sessionId, port: req.port }, "tunnel opened");
        return { tunnelId: req.tunnelId, connected: true };
      }),
    { queue: `workspace-${deps.runnerId}`, metrics: deps.metrics, log: deps.log },
  );
  return {
    subs: [input, open],
    stop: () => {
      for (const t of tunnels.values()) t.destroy();
      tunnels.clear();
    },
  };
}
