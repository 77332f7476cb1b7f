/**
 * How a preview request reaches its port (decision 0052): connections to a
 * session's port opened through the runner holding it — on the runner's data
 * plane (a TCP connection the `tunnel` rpc's ticket authorises) or, where it
 * has none or cannot be dialled, as a tunnel on the bus — and kept alive
 * between requests per (runner, placement, session, port), as any reverse
 * proxy keeps its upstream connections. A kept connection dies with what it
 * reaches: the app restarting (which is also when its ports are re-read),
 * the session suspending (the runner closes its connections before it
 * freezes) or moving (its sandbox goes). The session a URL names is read
 * from the scheduler and kept TARGET_FRESH_MS while it runs; a connection
 * opened on a kept public read asks the runner to check the port is public
 * still (`publicOnly`).
 */
import { Agent, type ClientRequest, type ClientRequestArgs } from "node:http";
import { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { callRpc, TunnelStream } from "@paddock/bus";
import { Api, ConflictError, TUNNEL_PING_MS, tunnelInSubject, tunnelOutSubject, UnavailableError, workspaceRpcs, type DataPlaneOffer, type Session } from "@paddock/contracts";
import { realEvery, type GatewayContext } from "../context.ts";
import type { DataPlaneDialer } from "./data-plane.ts";

/** The app's port did not answer (nothing listens, or the connection broke before an answer): 502. */
export class BadGatewayError extends UnavailableError {}

/** How long a running session's target is used without asking the scheduler again. */
export const TARGET_FRESH_MS = 2_000;
const MAX_TARGETS = 10_000;
/** A kept connection unused this long is closed (below the 5 s most HTTP servers keep an idle one). */
export const KEPT_IDLE_MS = 4_000;
const MAX_KEPT_PER_PORT = 16;

export interface PreviewTarget {
  session: Session;
  public: boolean;
  /** Read from the cache (the runner checks what it may have missed). */
  kept: boolean;
}

/** A port of a running session as a connection is opened to it. */
export interface PortRoute {
  session: Session;
  port: number;
  publicOnly: boolean;
}

interface RouteArgs extends ClientRequestArgs {
  paddockRoute: PortRoute;
  /** A connection opened before the request (its failure then comes before any byte of the body is taken). */
  paddockSocket?: Duplex;
}

function routeKey(r: PortRoute): string {
  return `${r.session.poolId}/${r.session.runnerId}/${r.session.placementGeneration}/${r.session.id}/${r.port}`;
}

class PreviewAgent extends Agent {
  constructor(private readonly open: (route: PortRoute) => Promise<Duplex>) {
    super({ keepAlive: true, maxFreeSockets: MAX_KEPT_PER_PORT });
  }

  override getName(options?: ClientRequestArgs): string {
    return routeKey((options as RouteArgs).paddockRoute);
  }

  override createConnection(options: ClientRequestArgs, callback?: (err: Error | null, stream: Duplex) => void): Duplex | null | undefined {
    const { paddockRoute, paddockSocket } = options as RouteArgs;
    if (paddockSocket) return paddockSocket;
    this.open(paddockRoute).then(
      (conn) => callback?.(null, conn),
      (err: unknown) => callback?.(err as Error, undefined as unknown as Duplex),
    );
    return undefined;
  }

  /** Only data-plane sockets are kept (a bus tunnel is one request's). */
  override keepSocketAlive(socket: Duplex): boolean {
    if (!(socket instanceof Socket)) return false;
    socket.setKeepAlive(true, 1_000);
    socket.unref();
    socket.setTimeout(KEPT_IDLE_MS);
    return true;
  }

  override reuseSocket(socket: Duplex, request: ClientRequest): void {
    super.reuseSocket(socket, request);
    (socket as Socket).setTimeout(0);
  }

  hasKept(route: PortRoute): boolean {
    return (this.freeSockets[routeKey(route)]?.length ?? 0) > 0;
  }
}

export class PreviewPool {
  readonly agent: PreviewAgent;
  private readonly targets = new Map<string, { target: PreviewTarget; until: number }>();
  constructor(
    private readonly ctx: GatewayContext,
    private readonly dialer: DataPlaneDialer,
  ) {
    this.agent = new PreviewAgent((route) => this.open(route));
  }

  /** The session a URL names and whether its port is public: kept while it runs, else asked for. */
  async target(sessionId: string, port: number, fresh = false): Promise<PreviewTarget> {
    const key = `${sessionId}/${port}`;
    const now = this.ctx.deps.now();
    const kept = this.targets.get(key);
    if (!fresh && kept && kept.until > now) return kept.target;
    const read = await callRpc(this.ctx.deps.nc, Api.previewTarget, { sessionId, port }, { timeoutMs: this.ctx.deps.config.rpcTimeoutMs });
    this.targets.delete(key);
    if (read.session.state === "running" && read.session.pending === undefined) {
      if (this.targets.size >= MAX_TARGETS) this.targets.delete(this.targets.keys().next().value as string);
      this.targets.set(key, { target: { ...read, kept: true }, until: now + TARGET_FRESH_MS });
    }
    return { ...read, kept: false };
  }

  forget(sessionId: string, port: number): void {
    this.targets.delete(`${sessionId}/${port}`);
  }

  /** Whether a request for route would find a kept connection (else one is opened before it: see PreviewProxy). */
  hasKept(route: PortRoute): boolean {
    return this.agent.hasKept(route);
  }

  /** A new connection to the port through the runner holding the running session: its data plane, else the bus. */
  async open(route: PortRoute): Promise<Duplex> {
    const { ctx } = this;
    const s = route.session;
    if (s.state !== "running" || !s.poolId || !s.runnerId) throw new ConflictError(`session is ${s.state}: its ports answer while it runs`);
    const runner = `${s.poolId}/${s.runnerId}`;
    const viaData = this.dialer.usable(runner);
    const tunnelId = ctx.deps.newId();
    const request = { sessionId: s.id, workspaceId: s.workspaceId, placementGeneration: s.placementGeneration, port: route.port, tunnelId, ...(viaData ? { via: "data" as const } : {}), ...(route.publicOnly ? { publicOnly: true } : {}) };
    // The bus tunnel's subscription is made before the open (its first bytes may follow the reply at once); unused on the data plane.
    const tunnel = this.busTunnel(s.poolId, s.runnerId, tunnelId);
    let data: DataPlaneOffer | undefined;
    try {
      const opened = await callRpc(ctx.deps.nc, workspaceRpcs(s.poolId, s.runnerId).tunnel, request, { timeoutMs: ctx.deps.config.workspaceRpcTimeoutMs });
      if (!opened.connected) throw new BadGatewayError(`nothing listens on port ${route.port} in the session`);
      data = opened.data;
    } catch (err) {
      tunnel.destroy();
      throw err;
    }
    if (!data) return tunnel;
    tunnel.destroy();
    // Not dialable from here: the dialer remembers, and this open goes again on the bus.
    return (await this.dialer.dial(runner, data)) ?? this.open(route);
  }

  private busTunnel(poolId: string, runnerId: string, tunnelId: string): TunnelStream {
    const { ctx } = this;
    const tunnel = new TunnelStream({ nc: ctx.deps.nc, sendTo: tunnelInSubject(poolId, runnerId, tunnelId), every: ctx.deps.every ?? realEvery, pingMs: TUNNEL_PING_MS });
    const sub = ctx.deps.nc.subscribe(tunnelOutSubject(poolId, runnerId, tunnelId), {
      callback: (err, msg) => {
        if (err) tunnel.destroy(err);
        else tunnel.receive(msg);
      },
    });
    tunnel.once("close", () => sub.unsubscribe());
    // Its error is seen by whoever uses it (the HTTP client, the upgrade's pipes) and, after they let
    // go (an abort arriving once the answer is complete), by no one: never an unhandled one.
    tunnel.on("error", () => undefined);
    return tunnel;
  }

  stop(): void {
    this.agent.destroy();
    this.targets.clear();
  }
}
