/**
 * The runner's `tunnel` rpc over a real nats-server: a port's connection
 * handed out on the data plane (dialled with the ticket) or carried on the
 * bus; `publicOnly` reaching the session's check; and the runner's tunnel
 * limit, where an idle kept connection makes room and a busy one does not.
 */
import { once } from "node:events";
import { connect, createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callRpc, TunnelStream } from "@paddock/bus";
import { NotFoundError, PaddockError, TUNNEL_PING_MS, tunnelInSubject, tunnelOutSubject, workspaceRpcs, type DataPlaneOffer, type HeldSession } from "@paddock/contracts";
import { silentLogger } from "@paddock/logging";
import { useNatsServer } from "@paddock/testing/vitest";
import { createRunnerMetrics } from "../metrics.ts";
import { translate } from "../workspace/workspace-ops.ts";
import { DataPlane } from "./data-plane.ts";
import { serveTunnels } from "./tunnels.ts";

const nats = useNatsServer();
const POOL = "p";
const RUNNER = "r-tunnels";
const held: HeldSession = { sessionId: "ses_t1", workspaceId: "w", placementGeneration: 1, runnerGeneration: 1 } as HeldSession;
let clock = 0;
let app: Server;
let plane: DataPlane;
let service: ReturnType<typeof serveTunnels>;
const publicOnlyAsked: boolean[] = [];
let n = 0;
/** Each of the app's connections, closed (the runner let go of it). */
const appClosed: Promise<unknown>[] = [];

beforeAll(async () => {
  // The session's app: echoes what it gets, prefixed.
  app = createServer((s) => {
    appClosed.push(new Promise((resolve) => s.once("close", resolve)));
    s.on("data", (d: Buffer) => s.write(`app:${d.toString()}`));
  });
  await new Promise<void>((resolve) => app.listen(0, "127.0.0.1", resolve));
  const timers = (ms: number, fn: () => void) => {
    const t = setTimeout(fn, ms);
    return () => clearTimeout(t);
  };
  plane = new DataPlane({ host: "127.0.0.1", port: 0, advertiseHost: "127.0.0.1", now: () => clock, after: timers, onActivity: () => undefined, log: silentLogger() });
  await plane.start();
  service = serveTunnels({
    nc: nats.nc,
    poolId: POOL,
    runnerId: RUNNER,
    maxTunnels: 2,
    held: () => ({
      held,
      connectPort: async (port, publicOnly) => {
        publicOnlyAsked.push(publicOnly === true);
        if (port !== 8000) throw new NotFoundError("port");
        const s = connect({ host: "127.0.0.1", port: (app.address() as AddressInfo).port });
        await once(s, "connect");
        return s;
      },
    }),
    translate,
    every: (ms, fn) => {
      const t = setInterval(fn, ms);
      return () => clearInterval(t);
    },
    onActivity: () => undefined,
    dataPlane: plane,
    metrics: createRunnerMetrics(),
    log: silentLogger(),
  });
});
afterAll(async () => {
  service?.stop();
  for (const s of service?.subs ?? []) s.unsubscribe();
  await plane?.stop();
  await new Promise<void>((resolve) => app.close(() => resolve()));
});

function open(extra: { via?: "bus" | "data"; publicOnly?: boolean; port?: number } = {}) {
  const tunnelId = `t${++n}`;
  const request = { sessionId: held.sessionId, workspaceId: held.workspaceId, placementGeneration: held.placementGeneration, port: extra.port ?? 8000, tunnelId, ...extra };
  return { tunnelId, reply: callRpc(nats.nc, workspaceRpcs(POOL, RUNNER).tunnel, request, { timeoutMs: 5_000 }) };
}

async function dial(offer: DataPlaneOffer): Promise<Socket> {
  const s = connect({ host: offer.host, port: offer.port });
  s.on("error", () => undefined);
  s.write(Buffer.from(offer.ticket, "base64url"));
  await once(s, "connect");
  return s;
}

async function roundTrip(s: Socket, text: string): Promise<string> {
  s.write(text);
  const [got] = (await once(s, "data")) as [Buffer];
  return got.toString();
}

describe("the tunnel rpc", () => {
  it("hands the port's connection out on the data plane, and says whether the session was asked for a public port only", async () => {
    const { reply } = open({ via: "data", publicOnly: true });
    const opened = await reply;
    expect(opened).toMatchObject({ connected: true, data: { host: "127.0.0.1" } });
    expect(publicOnlyAsked.at(-1)).toBe(true);
    const s = await dial(opened.data as DataPlaneOffer);
    expect(await roundTrip(s, "ping")).toBe("app:ping");
    s.destroy();
  });

  it("carries it on the bus when not asked for the data plane", async () => {
    const { tunnelId, reply } = open();
    const tunnel = new TunnelStream({ nc: nats.nc, sendTo: tunnelInSubject(POOL, RUNNER, tunnelId), every: (ms, fn) => {
      const t = setInterval(fn, ms);
      return () => clearInterval(t);
    }, pingMs: TUNNEL_PING_MS });
    const sub = nats.nc.subscribe(tunnelOutSubject(POOL, RUNNER, tunnelId), { callback: (_e, m) => tunnel.receive(m) });
    const opened = await reply;
    expect(opened).toEqual({ tunnelId, connected: true });
    expect(publicOnlyAsked.at(-1)).toBe(false);
    tunnel.write("bus");
    const [got] = (await once(tunnel, "data")) as [Buffer];
    expect(got.toString()).toBe("app:bus");
    tunnel.destroy();
    sub.unsubscribe();
  });

  it("answers the session's refusal as its error", async () => {
    const err = await open({ via: "data", port: 9 }).reply.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PaddockError);
    expect((err as PaddockError).code).toBe("not_found");
  });

  it("at its limit, closes an idle kept connection to make room, and refuses when every connection is busy", async () => {
    // The earlier tests' connections gone at the app's end: the runner let go of them first.
    await Promise.all(appClosed);
    expect(plane.size).toBe(0);
    const a = await dial((await open({ via: "data" }).reply).data as DataPlaneOffer);
    const b = await dial((await open({ via: "data" }).reply).data as DataPlaneOffer);
    expect(plane.size).toBe(2);
    // Both just moved bytes: no room.
    const refused = await open({ via: "data" }).reply.catch((e: unknown) => e);
    expect((refused as PaddockError).code).toBe("unavailable");
    // a goes quiet for longer than the eviction bound while b keeps talking: a is the one closed.
    clock += 5_000;
    expect(await roundTrip(b, "busy")).toBe("app:busy");
    const closed = once(a, "close");
    const c = await dial((await open({ via: "data" }).reply).data as DataPlaneOffer);
    await closed;
    expect(await roundTrip(c, "room")).toBe("app:room");
    expect(b.destroyed).toBe(false);
    b.destroy();
    c.destroy();
  });
});
