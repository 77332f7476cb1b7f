/**
 * Test harness for the gateway: a real nats-server, a stand-in for the
 * scheduler's rpcs (in-memory records), seeded tokens, and WebSocket helpers.
 * Used by *.test.ts only.
 */
import { randomUUID } from "node:crypto";
import { jetstream } from "@nats-io/jetstream";
import { connect, headers, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import WebSocket from "ws";
import { afterAll, beforeAll, beforeEach, expect } from "vitest";
import { provision } from "@paddock/bus";
import { decodeOutputFrame, FLEET_WORKSPACE, Headers, Subjects } from "@paddock/contracts";
import { silentLogger } from "@paddock/logging";
import { lateBound, startNatsServer, type NatsServerHandle } from "@paddock/testing";
import { seedMember, seedToken } from "../auth/auth.ts";
import { defaultConfig, type GatewayConfig } from "../config.ts";
import type { After, Every } from "../context.ts";
import { createGateway, type Gateway } from "../gateway.ts";
import { createGatewayMetrics, type GatewayMetrics } from "../metrics.ts";
import { FakeScheduler, NOW, RUNNER } from "./fake-scheduler.ts";

export { FakeScheduler, makeEnvironment, makeRunner, makeSession, NOW, RUNNER, type RpcCall } from "./fake-scheduler.ts";

export const WS1 = "ws1";
export const WS2 = "ws2";

/** Tokens seeded by the harness: name → [token, workspace, actor, role | undefined]. */
export const TOKENS = {
  alice: "tok_alice_0123456789abcdef",
  bob: "tok_bob_0123456789abcdef",
  admin: "tok_admin_0123456789abcdef",
  eve: "tok_eve_0123456789abcdef",
  outsider: "tok_outsider_0123456789abcdef",
  expired: "tok_expired_0123456789abcdef",
  /** Session parent1's own service token (actor kind service, no membership). */
  svc: "tok_svc_parent1_0123456789abcdef",
} as const;

/** The session the `svc` token acts for. */
export const SVC_SESSION = "parent1";

/** An injectable `after` (token expiry timers): fires only when a test calls fire(). */
export class ManualAfter {
  private readonly pending = new Set<{ ms: number; fn: () => void }>();
  readonly after: After = (ms, fn) => {
    const t = { ms, fn };
    this.pending.add(t);
    return () => this.pending.delete(t);
  };

  /** Runs every armed timer once (each re-checks the clock and may re-arm). */
  fire(): void {
    const due = [...this.pending];
    this.pending.clear();
    for (const t of due) t.fn();
  }

  get armed(): number[] {
    return [...this.pending].map((t) => t.ms);
  }
}

/** An injectable `every`: intervals fire only when a test calls tick(). */
export class ManualEvery {
  private readonly fns = new Set<() => void>();
  readonly periods: number[] = [];
  readonly every: Every = (ms, fn) => {
    this.periods.push(ms);
    this.fns.add(fn);
    return () => this.fns.delete(fn);
  };

  tick(): void {
    for (const fn of [...this.fns]) fn();
  }

  get active(): number {
    return this.fns.size;
  }
}

export interface Harness {
  nats: NatsServerHandle;
  nc: NatsConnection;
  scheduler: FakeScheduler;
  gateway: Gateway;
  metrics: GatewayMetrics;
  url: string;
  wsUrl: string;
  /** Starts one more gateway replica with its own NATS connection. */
  addGateway(): Promise<{ gateway: Gateway; nc: NatsConnection; url: string; wsUrl: string }>;
  stop(): Promise<void>;
}

/**
 * The shared preamble of a gateway test file: one harness for the file
 * (started before all, stopped after all) with the fake scheduler's call log
 * cleared before each test.
 */
export function useHarness(opts: Parameters<typeof startHarness>[0] = {}): Harness {
  let current: Harness | undefined;
  beforeAll(async () => {
    current = await startHarness(opts);
  });
  afterAll(async () => {
    await current?.stop();
  });
  beforeEach(() => {
    if (current) current.scheduler.calls.length = 0;
  });
  return lateBound("the gateway harness", () => current);
}

export async function startHarness(
  opts: { termMaxMsgsPerSubject?: number; config?: Partial<GatewayConfig>; every?: Every; now?: () => number; after?: After } = {},
): Promise<Harness> {
  const nats = await startNatsServer();
  const nc = await connect({ servers: nats.url });
  await provision(nc, { replicas: 1, ...(opts.termMaxMsgsPerSubject ? { termMaxMsgsPerSubject: opts.termMaxMsgsPerSubject } : {}) });
  const seed: Array<[string, string, string, "member" | "admin" | undefined, number | undefined]> = [
    [TOKENS.alice, WS1, "alice", "member", undefined],
    [TOKENS.bob, WS1, "bob", "member", undefined],
    [TOKENS.admin, WS1, "boss", "admin", undefined],
    [TOKENS.eve, WS2, "eve", "admin", undefined],
    [TOKENS.outsider, WS1, "outsider", undefined, undefined],
    [TOKENS.expired, WS1, "late", "member", NOW - 1],
  ];
  for (const [token, ws, actor, role, expiresAt] of seed) {
    await seedToken(nc, token, {
      workspaceId: ws,
      actor: { id: actor, kind: "user" },
      createdAt: NOW - 1000,
      ...(expiresAt !== undefined ? { expiresAt } : {}),
    });
    if (role) await seedMember(nc, { workspaceId: ws, actorId: actor, role });
  }
  // "boss" also runs the fleet (drain, cordon, uncordon); eve, an admin of WS2, does not.
  await seedMember(nc, { workspaceId: FLEET_WORKSPACE, actorId: "boss", role: "admin" });
  await seedToken(nc, TOKENS.svc, {
    workspaceId: WS1,
    actor: { id: `svc-${SVC_SESSION}`, kind: "service" },
    sessionId: SVC_SESSION,
    createdAt: NOW - 1000,
  });
  const scheduler = new FakeScheduler(nc);
  scheduler.start();
  const config = defaultConfig({ maxBodyBytes: 4096, rpcTimeoutMs: 2000, ...opts.config });
  const extra: Array<{ gateway: Gateway; nc: NatsConnection }> = [];
  const build = (conn: NatsConnection, metrics = createGatewayMetrics()) =>
    createGateway({
      nc: conn,
      config,
      log: silentLogger(),
      metrics,
      now: opts.now ?? (() => NOW),
      newId: randomUUID,
      readSession: scheduler.readRecord,
      ...(opts.every ? { every: opts.every } : {}),
      ...(opts.after ? { after: opts.after } : {}),
    });
  const metrics = createGatewayMetrics();
  const gateway = build(nc, metrics);
  const { port } = await gateway.listen(0, "127.0.0.1");
  return {
    nats,
    nc,
    scheduler,
    gateway,
    metrics,
    url: `http://127.0.0.1:${port}`,
    wsUrl: `ws://127.0.0.1:${port}`,
    addGateway: async () => {
      const nc2 = await connect({ servers: nats.url });
      const gw = build(nc2);
      const { port: p } = await gw.listen(0, "127.0.0.1");
      extra.push({ gateway: gw, nc: nc2 });
      return { gateway: gw, nc: nc2, url: `http://127.0.0.1:${p}`, wsUrl: `ws://127.0.0.1:${p}` };
    },
    stop: async () => {
      for (const e of extra) {
        await e.gateway.close();
        await e.nc.drain();
      }
      await gateway.close();
      scheduler.stop();
      await nc.drain();
      await nats.stop();
    },
  };
}

/** Appends a TERM chunk as a runner would (by default the runner makeSession places sessions on); resolves with its stream sequence. */
export async function publishChunk(
  nc: NatsConnection,
  sessionId: string,
  app: string,
  data: string | Uint8Array,
  opts: { placementGeneration?: number; exitCode?: string; terminalSize?: string; runner?: { poolId: string; runnerId: string } } = {},
): Promise<number> {
  const runner = opts.runner ?? { poolId: RUNNER.poolId, runnerId: RUNNER.id };
  const h = headers();
  h.set(Headers.placementGeneration, String(opts.placementGeneration ?? 1));
  if (opts.exitCode !== undefined) h.set(Headers.exitCode, opts.exitCode);
  // A resize marker: data is "" as the runner writes it.
  if (opts.terminalSize !== undefined) h.set(Headers.terminalSize, opts.terminalSize);
  const ack = await jetstream(nc).publish(Subjects.term(runner.poolId, runner.runnerId, sessionId, app), opts.exitCode !== undefined ? new Uint8Array(0) : data, { headers: h });
  return ack.seq;
}

export type Frame =
  | { kind: "text"; value: Record<string, unknown> }
  | { kind: "binary"; cursor: number; text: string };

/** A WebSocket client that queues every frame, so tests await frames in order. */
export class WsClient {
  private readonly frames: Frame[] = [];
  private waiters: Array<(f: Frame) => void> = [];
  readonly closed: Promise<{ code: number; reason: string }>;

  constructor(readonly ws: WebSocket) {
    ws.on("message", (data, isBinary) => {
      const buf = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      let frame: Frame;
      if (isBinary) {
        const { cursor, bytes } = decodeOutputFrame(buf);
        frame = { kind: "binary", cursor, text: Buffer.from(bytes).toString("utf8") };
      } else {
        frame = { kind: "text", value: JSON.parse(buf.toString("utf8")) as Record<string, unknown> };
      }
      const w = this.waiters.shift();
      if (w) w(frame);
      else this.frames.push(frame);
    });
    this.closed = new Promise((resolve) => ws.on("close", (code, reason) => resolve({ code, reason: reason.toString() })));
  }

  next(): Promise<Frame> {
    const f = this.frames.shift();
    if (f) return Promise.resolve(f);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  async nextText(): Promise<Record<string, unknown>> {
    const f = await this.next();
    if (f.kind !== "text") throw new Error(`expected a text frame, got binary cursor ${f.cursor}`);
    return f.value;
  }

  async nextBinary(): Promise<{ cursor: number; text: string }> {
    const f = await this.next();
    if (f.kind !== "binary") throw new Error(`expected a binary frame, got ${JSON.stringify(f.value)}`);
    return { cursor: f.cursor, text: f.text };
  }

  /** Frames received but not yet taken. */
  get queued(): number {
    return this.frames.length;
  }

  close(): void {
    this.ws.close();
  }
}

export type OpenResult = { ok: true; client: WsClient } | { ok: false; status: number; body: string };

export function openTerminal(
  wsUrl: string,
  sessionId: string,
  query: string,
  token?: string,
  extraHeaders: Record<string, string> = {},
): Promise<OpenResult> {
  const ws = new WebSocket(`${wsUrl}/v1/sessions/${sessionId}/terminal${query ? `?${query}` : ""}`, {
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...extraHeaders },
  });
  const client = new WsClient(ws);
  return new Promise((resolve, reject) => {
    ws.once("open", () => resolve({ ok: true, client }));
    ws.once("unexpected-response", (_req, res) => {
      let body = "";
      res.on("data", (d: Buffer) => (body += d.toString()));
      res.on("end", () => resolve({ ok: false, status: res.statusCode ?? 0, body }));
    });
    ws.once("error", (err) => reject(err));
  });
}

export async function openOk(wsUrl: string, sessionId: string, query: string, token: string): Promise<WsClient> {
  const r = await openTerminal(wsUrl, sessionId, query, token);
  if (!r.ok) throw new Error(`attach refused: ${r.status} ${r.body}`);
  return r.client;
}

/** Collects the messages of a core NATS subject, to await them in order. */
export class Collector {
  private readonly msgs: Msg[] = [];
  private waiters: Array<(m: Msg) => void> = [];
  readonly sub: Subscription;

  constructor(nc: NatsConnection, subject: string) {
    this.sub = nc.subscribe(subject, {
      callback: (_err, m) => {
        const w = this.waiters.shift();
        if (w) w(m);
        else this.msgs.push(m);
      },
    });
  }

  next(): Promise<Msg> {
    const m = this.msgs.shift();
    if (m) return Promise.resolve(m);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** The next message that is not a claim. */
  async nextInput(): Promise<Msg> {
    for (;;) {
      const m = await this.next();
      if (m.headers?.get(Headers.inputKind) !== "claim") return m;
    }
  }
}

export async function api(
  base: string,
  method: string,
  path: string,
  opts: { token?: string; body?: string | Buffer; headers?: Record<string, string> } = {},
): Promise<{ status: number; json: any; text: string; headers: globalThis.Headers }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}), ...opts.headers },
    ...(opts.body !== undefined ? { body: opts.body } : {}),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text, headers: res.headers };
}

/** Asserts a typed error answer: the status and `{"error":{"code","message"}}` with that code. */
export function expectError(r: { status: number; json: any }, status: number, code: string): void {
  expect(r.status).toBe(status);
  expect(r.json).toMatchObject({ error: { code, message: expect.any(String) } });
}
