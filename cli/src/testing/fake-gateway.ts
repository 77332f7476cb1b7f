/**
 * A small in-process stand-in for the gateway's public API, for CLI tests
 * that need no stack: sessions in memory, a scripted terminal per session
 * speaking the attach protocol (hello, cursor frames, exit, superseded).
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { WebSocketServer, type WebSocket } from "ws";
import {
  CLOSE_SUPERSEDED,
  encodeOutputFrame,
  isTerminal,
  type AuditEvent,
  type ErrorBody,
  type ServerFrame,
  type Session,
} from "@paddock/contracts";

export interface FakeTerminal {
  readonly session: Session;
  /** Every output chunk, cursor = index + 1. */
  readonly log: Buffer[];
  exitCode: number | null | undefined;
  /** Bytes a controller sent. */
  readonly input: Buffer[];
  readonly resizes: Array<{ cols: number; rows: number }>;
  /** Open terminal sockets and their mode. */
  readonly sockets: Map<WebSocket, "viewer" | "controller">;
  emit(text: string): void;
  exit(code: number | null): void;
}

export interface FakeGateway {
  readonly url: string;
  readonly token: string;
  readonly terminals: Map<string, FakeTerminal>;
  /** The query of every terminal attach, in order. */
  readonly attaches: URLSearchParams[];
  readonly events: AuditEvent[];
  pageSize: number;
  /** Called when a session is created (its "process" starts), and on each input chunk. */
  program: { start?(t: FakeTerminal): void; input?(t: FakeTerminal, bytes: Buffer): void };
  /** Called after hello and replay on each attach; the default does nothing. */
  onAttach?: (t: FakeTerminal, ws: WebSocket, n: number) => void;
  close(): Promise<void>;
}

export async function startFakeGateway(): Promise<FakeGateway> {
  const token = "fake-token";
  const terminals = new Map<string, FakeTerminal>();
  const attaches: URLSearchParams[] = [];
  let seq = 0;
  const wss = new WebSocketServer({ noServer: true });

  const terminalOf = (session: Session): FakeTerminal => {
    const t: FakeTerminal = {
      session,
      log: [],
      exitCode: undefined,
      input: [],
      resizes: [],
      sockets: new Map(),
      emit(text) {
        t.log.push(Buffer.from(text));
        for (const ws of t.sockets.keys()) ws.send(encodeOutputFrame(t.log.length, Buffer.from(text)));
      },
      exit(code) {
        t.exitCode = code;
        session.state = "dead";
        session.childExitCode = code;
        for (const ws of t.sockets.keys()) sendExit(ws, code);
      },
    };
    return t;
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => fail(res, 500, { code: "internal", message: String(err) }));
  });
  const gw: FakeGateway = {
    url: "",
    token,
    terminals,
    attaches,
    events: [],
    pageSize: 50,
    program: {},
    close: async () => {
      for (const t of terminals.values()) for (const ws of t.sockets.keys()) ws.terminate();
      wss.close();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.headers.authorization !== `Bearer ${token}`) return fail(res, 401, { code: "unauthenticated", message: "missing or invalid token" });
    const url = new URL(req.url ?? "/", "http://x");
    const parts = url.pathname.split("/").filter(Boolean);
    const t = parts[2] === undefined ? undefined : terminals.get(parts[2]);
    if (req.method === "POST" && url.pathname === "/v1/sessions") {
      const body = JSON.parse(await readBody(req)) as { name?: string; spec: Session["spec"] };
      seq += 1;
      const session: Session = {
        id: `s${String(seq)}`,
        workspaceId: "default",
        creatorId: "dev",
        name: body.name,
        state: "running",
        spec: body.spec,
        mode: "run",
        oneShot: false,
        runnerId: "runner-1",
        placementGeneration: 1,
        controllerGeneration: 0,
        childExitCode: null,
        createdAt: 1_700_000_000_000 + seq,
        updatedAt: 1_700_000_000_000 + seq,
        lastFact: { eventId: `e${String(seq)}`, action: "create", actorId: "dev", at: 1_700_000_000_000 },
      };
      const term = terminalOf(session);
      terminals.set(session.id, term);
      gw.program.start?.(term);
      return send(res, 201, session);
    }
    if (req.method === "GET" && url.pathname === "/v1/sessions") {
      const all = [...terminals.values()].map((x) => x.session);
      const from = Number(url.searchParams.get("cursor") ?? "0");
      const limit = Math.min(gw.pageSize, Number(url.searchParams.get("limit") ?? "50"));
      const page = all.slice(from, from + limit);
      const next = from + limit < all.length ? String(from + limit) : undefined;
      return send(res, 200, { sessions: page, nextCursor: next });
    }
    if (req.method === "GET" && url.pathname === "/v1/events") {
      // Like the gateway: `since` is the cursor, and the query is strict.
      if (url.searchParams.has("cursor")) return fail(res, 400, { code: "invalid", message: "query: unknown key cursor" });
      const from = Number(url.searchParams.get("since") ?? "0");
      const next = from + gw.pageSize < gw.events.length ? String(from + gw.pageSize) : undefined;
      return send(res, 200, { events: gw.events.slice(from, from + gw.pageSize), nextCursor: next });
    }
    if (req.method === "GET" && url.pathname === "/v1/runners") return send(res, 200, { runners: [] });
    if (!t || parts[0] !== "v1" || parts[1] !== "sessions") return fail(res, 404, { code: "not_found", message: "session not found" });
    if (req.method === "GET" && parts.length === 3) return send(res, 200, t.session);
    if (req.method === "DELETE" && parts.length === 3) {
      t.session.state = "destroyed";
      return send(res, 200, t.session);
    }
    if (req.method === "GET" && parts[3] === "log") {
      res.writeHead(200, { "content-type": "application/octet-stream" });
      res.end(Buffer.concat(t.log));
      return;
    }
    fail(res, 404, { code: "not_found", message: "no such route" });
  }

  server.on("upgrade", (req, socket, head) => {
    const url = new URL(req.url ?? "/", "http://x");
    const id = url.pathname.split("/")[3] ?? "";
    const t = terminals.get(id);
    const refuse = (status: number, body: ErrorBody) => {
      const text = JSON.stringify({ error: body });
      socket.end(`HTTP/1.1 ${String(status)} Refused\r\ncontent-type: application/json\r\ncontent-length: ${String(Buffer.byteLength(text))}\r\nconnection: close\r\n\r\n${text}`);
    };
    if (req.headers.authorization !== `Bearer ${token}`) return refuse(401, { code: "unauthenticated", message: "missing or invalid token" });
    if (!t) return refuse(404, { code: "not_found", message: "session not found" });
    if (url.searchParams.get("mode") === "controller" && isTerminal(t.session.state)) {
      return refuse(409, { code: "conflict", message: `session has ended (${t.session.state})` });
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      attaches.push(url.searchParams);
      attach(t, ws, url.searchParams);
    });
  });

  function attach(t: FakeTerminal, ws: WebSocket, q: URLSearchParams): void {
    const mode = q.get("mode") === "controller" ? "controller" : "viewer";
    if (mode === "controller") {
      t.session.controllerGeneration += 1;
      for (const [old, oldMode] of t.sockets) {
        if (oldMode !== "controller") continue;
        sendText(old, { type: "superseded", controllerGeneration: t.session.controllerGeneration });
        old.close(CLOSE_SUPERSEDED);
      }
    }
    t.sockets.set(ws, mode);
    ws.on("close", () => t.sockets.delete(ws));
    sendText(ws, { type: "hello", sessionId: t.session.id, app: "main", mode, controllerGeneration: t.session.controllerGeneration, cursor: t.log.length });
    const since = q.get("since") ?? "screen";
    const from = since === "all" || since === "screen" ? 0 : Number(since);
    if (since === "screen" && t.log.length) ws.send(encodeOutputFrame(t.log.length, Buffer.concat(t.log)));
    else t.log.slice(from).forEach((chunk, i) => ws.send(encodeOutputFrame(from + i + 1, chunk)));
    if (t.exitCode !== undefined) return sendExit(ws, t.exitCode);
    ws.on("message", (data, isBinary) => {
      const buf = Buffer.isBuffer(data) ? data : Buffer.from(data as ArrayBuffer);
      if (!isBinary) {
        t.resizes.push(JSON.parse(buf.toString()) as { cols: number; rows: number });
        return;
      }
      if (mode === "viewer") return sendText(ws, { type: "error", code: "read_only" });
      t.input.push(buf);
      gw.program.input?.(t, buf);
    });
    gw.onAttach?.(t, ws, attaches.length);
  }

  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  (gw as { url: string }).url = `http://127.0.0.1:${String((server.address() as AddressInfo).port)}`;
  return gw;
}

function sendText(ws: WebSocket, frame: ServerFrame): void {
  ws.send(JSON.stringify(frame));
}

function sendExit(ws: WebSocket, code: number | null): void {
  sendText(ws, { type: "exit", app: "main", code });
  ws.close(1000);
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

function fail(res: ServerResponse, status: number, error: ErrorBody): void {
  send(res, status, { error });
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}
