/**
 * A caller's file call asked of the runner beside its authorization
 * (decision 0068), against a stand-in runner whose data plane is a TCP
 * server of the test's: the early connection carries no byte past its
 * ticket unless the call is authorized and the session is still held
 * there, and is closed when it is not used — refused or moved.
 */
import { randomBytes } from "node:crypto";
import { createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Subscription } from "@nats-io/transport-node";
import { createBusMetrics, serveRpcWithBytes } from "@paddock/bus";
import { DATA_TICKET_BYTES, workspaceRpcs } from "@paddock/contracts";
import { silentLogger } from "@paddock/logging";
import { api, makeSession, RUNNER, startHarness, TOKENS, WS1, type Harness } from "../testing/testkit.ts";

/** One connection to the stand-in data plane: what came after its ticket, and its close. */
interface Conn {
  kind: "read" | "write";
  after: Buffer;
  closed: Promise<void>;
}

let h: Harness;
let subs: Subscription[] = [];
let plane: Server;
const FILE = randomBytes(300_000);
/** Tickets offered, by kind; connections as they come. */
const offered = new Map<string, "read" | "write">();
const conns: Conn[] = [];
let onConn: ((c: Conn) => void) | undefined;

/** The stand-in data plane: a write's bytes are taken to the half-close and answered; a read's ticket is answered with FILE. */
function serveConnection(socket: Socket): void {
  let head = Buffer.alloc(0);
  let conn: Conn | undefined;
  const parts: Buffer[] = [];
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.on("error", () => undefined);
  socket.on("data", (bytes: Buffer) => {
    if (conn) return void parts.push(bytes);
    head = Buffer.concat([head, bytes]);
    if (head.length < DATA_TICKET_BYTES) return;
    const kind = offered.get(head.subarray(0, DATA_TICKET_BYTES).toString("base64url"));
    if (!kind) return void socket.destroy();
    conn = { kind, after: Buffer.alloc(0), closed };
    if (head.length > DATA_TICKET_BYTES) parts.push(head.subarray(DATA_TICKET_BYTES));
    conns.push(conn);
    onConn?.(conn);
    if (kind === "read") socket.end(FILE);
  });
  socket.once("end", () => {
    if (!conn) return;
    conn.after = Buffer.concat(parts);
    if (conn.kind === "write") socket.end(JSON.stringify({ ok: true, result: { path: "f.bin", size: conn.after.length } }));
  });
}

function standInRunner(): Subscription[] {
  const rpcs = workspaceRpcs(RUNNER.poolId, RUNNER.id);
  const opts = { queue: "runner", metrics: createBusMetrics(), log: silentLogger() };
  const offer = (kind: "read" | "write") => {
    const ticket = randomBytes(DATA_TICKET_BYTES).toString("base64url");
    offered.set(ticket, kind);
    return { host: "127.0.0.1", port: (plane.address() as AddressInfo).port, ticket };
  };
  return [
    serveRpcWithBytes(h.nc, rpcs.write, () => Promise.resolve({ result: { data: offer("write") } }), opts),
    serveRpcWithBytes(h.nc, rpcs.read, () => Promise.resolve({ result: { size: FILE.length, start: 0, end: FILE.length - 1, unsatisfiable: false, data: offer("read") } }), opts),
  ];
}

beforeAll(async () => {
  h = await startHarness({ config: { maxUploadBytes: 1024 * 1024 } });
  plane = createServer({ allowHalfOpen: true }, serveConnection);
  await new Promise<void>((resolve) => plane.listen(0, "127.0.0.1", resolve));
  subs = standInRunner();
});
afterAll(async () => {
  for (const s of subs) s.unsubscribe();
  await new Promise<void>((resolve) => plane.close(() => resolve()));
  await h.stop();
});

let n = 0;
function held(creatorId: string, placementGeneration: number, id = `fe${++n}`): string {
  h.scheduler.put(makeSession({ id, workspaceId: WS1, creatorId, state: "running", poolId: RUNNER.poolId, runnerId: RUNNER.id, placementGeneration }));
  return id;
}

/** The next connection the stand-in data plane takes. */
const nextConn = () => new Promise<Conn>((resolve) => (onConn = resolve));

const put = (id: string, token: string, body: Buffer) => api(h.url, "PUT", `/v1/sessions/${id}/files?path=f.bin`, { token, body });

describe("file calls asked of the runner beside their authorization", () => {
  it("a refused call's early connection gets no byte past its ticket, and is closed", async () => {
    const id = held("alice", 1);
    const body = randomBytes(200_000);
    expect((await put(id, TOKENS.alice, body)).status).toBe(200);
    // alice may write only her own sessions: the same session, now bob's, refuses her; her hint still names it.
    held("bob", 1, id);
    const early = nextConn();
    expect((await put(id, TOKENS.alice, body)).status).toBe(403);
    const conn = await early;
    await conn.closed;
    expect([conn.kind, conn.after.length]).toEqual(["write", 0]);
  });

  it("a session moved meanwhile: the early connection is closed unused and the call goes to a fresh offer", async () => {
    const id = held("alice", 1);
    const body = randomBytes(200_000);
    expect((await put(id, TOKENS.alice, body)).status).toBe(200);
    held("alice", 2, id);
    conns.length = 0;
    expect((await put(id, TOKENS.alice, body)).status).toBe(200);
    await Promise.all(conns.map((c) => c.closed));
    expect(conns.map((c) => [c.kind, c.after.length])).toEqual([
      ["write", 0],
      ["write", body.length],
    ]);
    // A read: the early one's bytes never reach the client; the fresh one's do, once.
    conns.length = 0;
    held("alice", 3, id);
    const read = await fetch(`${h.url}/v1/sessions/${id}/files?path=f.bin`, { headers: { authorization: `Bearer ${TOKENS.alice}` } });
    expect(Buffer.from(await read.arrayBuffer()).equals(FILE)).toBe(true);
    await Promise.all(conns.map((c) => c.closed));
    expect(conns.map((c) => c.kind)).toEqual(["read", "read"]);
  });

  it("a caller with the session where it found it uses the early connection: one connection per call", async () => {
    const id = held("alice", 1);
    const body = randomBytes(200_000);
    expect((await put(id, TOKENS.alice, body)).status).toBe(200);
    conns.length = 0;
    expect((await put(id, TOKENS.alice, body)).status).toBe(200);
    await Promise.all(conns.map((c) => c.closed));
    expect(conns.map((c) => [c.kind, c.after.length])).toEqual([["write", body.length]]);
  });
});
