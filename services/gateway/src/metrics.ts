import { Counter, Gauge, Registry } from "prom-client";
import { createBusMetrics, type BusMetrics } from "@paddock/bus";

export interface GatewayMetrics {
  registry: Registry;
  bus: BusMetrics;
  httpRequests: Counter<"route" | "status">;
  wsAttaches: Counter<"mode" | "outcome">;
  wsOpen: Gauge<"mode">;
  /** Clients closed with 4008 because their send buffer overflowed. */
  slowClients: Counter;
  /** TERM chunks not shown: `stale` (an older placement generation) or `foreign` (not the placed runner's subject). */
  droppedChunks: Counter<"reason">;
  /** Controllers closed with 4001 by a newer controller. */
  superseded: Counter;
  /** Controller input refused: viewer input, or input after supersede. */
  inputDropped: Counter<"reason">;
  /** Screen snapshots served, by how: `empty` log, `cached` emulator, runner `checkpoint` (plus a `tail`), full `replay`. */
  screenSnapshots: Counter<"source">;
  /** Screen checkpoints not used: `stale`, `foreign`, `ahead` (as chunks), `invalid` body, cursor `beyond_log`. */
  droppedCheckpoints: Counter<"reason">;
  /** Connections turned away at accept: over the `total` cap or the `per_address` cap. */
  connectionsRefused: Counter<"reason">;
}

export function createGatewayMetrics(registry = new Registry()): GatewayMetrics {
  const r = [registry];
  return {
    registry,
    bus: createBusMetrics(registry),
    httpRequests: new Counter({ name: "paddock_gateway_http_requests_total", help: "HTTP requests by route and status", labelNames: ["route", "status"], registers: r }),
    wsAttaches: new Counter({ name: "paddock_gateway_ws_attaches_total", help: "Terminal attach attempts by mode and outcome", labelNames: ["mode", "outcome"], registers: r }),
    wsOpen: new Gauge({ name: "paddock_gateway_ws_open", help: "Open terminal WebSockets", labelNames: ["mode"], registers: r }),
    slowClients: new Counter({ name: "paddock_gateway_ws_slow_clients_total", help: "Terminal clients closed for a full send buffer", registers: r }),
    droppedChunks: new Counter({
      name: "paddock_gateway_dropped_chunks_total",
      help: "TERM chunks not shown: an older placement generation (stale) or another runner's subject (foreign)",
      labelNames: ["reason"],
      registers: r,
    }),
    superseded: new Counter({ name: "paddock_gateway_superseded_total", help: "Controllers superseded by a newer one", registers: r }),
    inputDropped: new Counter({ name: "paddock_gateway_input_dropped_total", help: "Terminal input not forwarded, by reason", labelNames: ["reason"], registers: r }),
    screenSnapshots: new Counter({
      name: "paddock_gateway_screen_snapshots_total",
      help: "Screen snapshots served, by source: empty, cached, checkpoint, checkpoint_tail, replay",
      labelNames: ["source"],
      registers: r,
    }),
    droppedCheckpoints: new Counter({
      name: "paddock_gateway_dropped_checkpoints_total",
      help: "Screen checkpoints not used: stale, foreign, ahead, invalid, beyond_log",
      labelNames: ["reason"],
      registers: r,
    }),
    connectionsRefused: new Counter({
      name: "paddock_gateway_connections_refused_total",
      help: "Connections turned away at accept, by cap: total, per_address",
      labelNames: ["reason"],
      registers: r,
    }),
  };
}
