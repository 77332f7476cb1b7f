/**
 * A small in-process stand-in for the gateway's public API, for CLI tests
 * that need no stack: sessions in memory, a scripted terminal per session
 * speaking the attach protocol (hello, cursor frames, exit, superseded).
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { handleAgents, isAgentRoute, newFakeAgents, type FakeAgents } from "./fake-agents.ts";
import { handleEnvironments, isEnvironmentRoute, type FakeEnvironments } from "./fake-environments.ts";
import { entryOf, fail, readBody, send, type FakeCall } from "./fake-http.ts";
import { handleRunners, isRunnerRoute, type FakeRunners } from "./fake-runners.ts";
import { WebSocketServer, type WebSocket } from "ws";
import {
  appsOf,
  canTransition,
  CLOSE_SUPERSEDED,
  encodeOutputFrame,
  findHttpRoute,
  isTerminal,
  NDJSON,
  parseHttpInput,
  type AttachMode,
  type AuditEvent,
  type BodyOf,
  type ErrorBody,
  type HttpApi,
  type PendingOp,
  type QueryOf,
  type ServerFrame,
  type Session,
  type SessionState,
} from "@paddock/contracts";
import { lateBound, makeSession } from "@paddock/testing";
import { afterEach, beforeEach } from "vitest";

export interface FakeTerminal {
  readonly session: Session;
  /** Every output chunk, cursor = index + 1. */
  readonly log: Buffer[];
  exitCode: number | null | undefined;
  /** Bytes a controller sent. */
  readonly input: Buffer[];
  readonly resizes: Array<{ cols: number; rows: number }>;
  /** Open terminal sockets and their mode. */
  readonly sockets: Map<WebSocket, AttachMode>;
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
  /** Queries of every `GET /v1/events?follow=true`. */
  readonly follows: URLSearchParams[];
  /** Raw text the follow stream ends with (to test a malformed line). */
  followTail: string;
  /** Every authenticated request with its parsed JSON body (undefined when empty). */
  readonly requests: Array<{ method: string; path: string; body: unknown }>;
  readonly environments: FakeEnvironments;
  readonly runners: FakeRunners;
  /** Each session's agents (the agents routes answer a session the fake holds only). */
  readonly agents: FakeAgents;
  /** Whether the token is a workspace admin (runner state changes need one); default true. */
  admin: boolean;
  pageSize: number;
  /** A restart answers the pending record (the runner has not started the new generation yet). */
  restartPending: boolean;
  /**
   * A runner slower than the API's wait: suspend and resume answer the pending record, which the next `reads` GETs still show;
   * a snapshot answers 202, and the next `reads` GETs of its request 202 again; then it is done, or refused with `refuse`.
   */
  slowRunner?: { reads: number; refuse?: string };
  /** Called when a session is created (its "process" starts), and on each input chunk. */
  program: { start?(t: FakeTerminal): void; input?(t: FakeTerminal, bytes: Buffer): void };
  /** Called after hello and replay on each attach; the default does nothing. */
  onAttach?: (t: FakeTerminal, ws: WebSocket, n: number) => void;
  close(): Promise<void>;
}

/**
 * The shared preamble of a CLI test file (or describe block): a fresh fake
 * gateway for each test, closed after it, and the CLI environment pointing at it.
 */
export function useFakeGateway(): { gw: FakeGateway; env: Record<string, string> } {
  let gw: FakeGateway | undefined;
  let env: Record<string, string> | undefined;
  beforeEach(async () => {
    gw = await startFakeGateway();
    env = { PADDOCK_URL: gw.url, PADDOCK_TOKEN: gw.token };
  });
  afterEach(async () => {
    await gw?.close();
  });
  return { gw: lateBound("the fake gateway", () => gw), env: lateBound("the CLI environment", () => env) };
}

export async function startFakeGateway(): Promise<FakeGateway> {
  const token = "fake-token";
  const terminals = new Map<string, FakeTerminal>();
  const attaches: URLSearchParams[] = [];
  const idempotent = new Map<string, Session>();
  let seq = 0;
  /** Operations a slow runner has not finished: what the record becomes once `reads` GETs have seen it pending. */
  const slow = new Map<string, { op: PendingOp["op"]; requestId: string; to: SessionState; reads: number; refuse?: string }>();
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
    follows: [],
    followTail: "",
    requests: [],
    environments: new Map(),
    runners: new Map(),
    agents: newFakeAgents(),
    admin: true,
    pageSize: 50,
    restartPending: false,
    program: {},
    close: async () => {
      for (const t of terminals.values()) for (const ws of t.sockets.keys()) ws.terminate();
      wss.close();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };

  /**
   * Every request is matched and parsed by the HTTP contract, like the
   * gateway: an unknown route is 404, input its schemas refuse is 400.
   */
  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.headers.authorization !== `Bearer ${token}`) return fail(res, 401, { code: "unauthenticated", message: "missing or invalid token" });
    const url = new URL(req.url ?? "/", "http://x");
    const method = req.method ?? "GET";
    const text = method === "GET" ? "" : await readBody(req);
    gw.requests.push({ method, path: url.pathname + url.search, body: text === "" ? undefined : (JSON.parse(text) as unknown) });
    const found = findHttpRoute(method, url.pathname);
    if (!found) return fail(res, 404, { code: "not_found", message: "no such route" });
    const input = parseHttpInput(found.route, { params: found.params, query: url.searchParams, bodyText: text });
    if (!input.ok) return fail(res, 400, { code: "invalid", message: input.message });
    const { name } = found;
    const call: FakeCall = { name, params: input.params, query: input.query, rawQuery: url.searchParams, body: input.body };
    if (isEnvironmentRoute(name)) return handleEnvironments(gw, call, res);
    if (isRunnerRoute(name)) return handleRunners(gw, call, res);
    if (isAgentRoute(name)) {
      const { id } = call.params as { id: string };
      if (!terminals.has(id)) return fail(res, 404, { code: "not_found", message: "session not found" });
      return handleAgents(gw.agents, id, call, res);
    }
    return handleSessions(call, res);
  }

  function handleSessions(call: FakeCall, res: ServerResponse): void {
    switch (call.name) {
      case "createSession": {
        const b = call.body as BodyOf<typeof HttpApi.createSession>;
        const prior = b.idempotencyKey === undefined ? undefined : idempotent.get(b.idempotencyKey);
        if (prior) return send(res, 200, prior);
        seq += 1;
        const session = newSession(`s${String(seq)}`, seq, b);
        if (b.idempotencyKey !== undefined) idempotent.set(b.idempotencyKey, session);
        const term = terminalOf(session);
        terminals.set(session.id, term);
        gw.program.start?.(term);
        return send(res, 201, session);
      }
      case "listSessions": {
        const q = call.query as QueryOf<typeof HttpApi.listSessions>;
        const all = [...terminals.values()]
          .map((x) => x.session)
          .filter((s) => (q.parentId === undefined || s.parentId === q.parentId) && (q.creatorId === undefined || s.creatorId === q.creatorId));
        const from = Number(q.cursor ?? "0");
        const limit = Math.min(gw.pageSize, q.limit);
        const next = from + limit < all.length ? String(from + limit) : undefined;
        return send(res, 200, { sessions: all.slice(from, from + limit), nextCursor: next });
      }
      case "listEvents": {
        const q = call.query as QueryOf<typeof HttpApi.listEvents>;
        if (q.follow) {
          gw.follows.push(call.rawQuery);
          // NDJSON of the events so far, then the stream ends (as when the gateway restarts).
          res.writeHead(200, { "content-type": NDJSON });
          gw.events.forEach((e, i) => {
            if (q.sessionId === undefined || e.resource.id === q.sessionId) res.write(JSON.stringify(entryOf(e, i)) + "\n");
          });
          res.end(gw.followTail);
          return;
        }
        const since = Number(q.since);
        const next = since + gw.pageSize < gw.events.length ? String(since + gw.pageSize) : undefined;
        return send(res, 200, { events: gw.events.slice(since, since + gw.pageSize).map((e, i) => entryOf(e, since + i)), nextCursor: next });
      }
    }
    const { id, app } = call.params as { id: string; app?: string };
    const t = terminals.get(id);
    if (!t) return fail(res, 404, { code: "not_found", message: "session not found" });
    const s = t.session;
    switch (call.name) {
      case "getSession": {
        const op = slow.get(s.id);
        if (op && op.reads-- <= 0) {
          slow.delete(s.id);
          delete s.pending;
          if (op.refuse === undefined) s.state = op.to;
          else s.refusal = { requestId: op.requestId, op: op.op, reason: op.refuse, at: 1_700_000_000_000 };
        }
        return send(res, 200, s);
      }
      case "deleteSession":
        s.state = "destroyed";
        return send(res, 200, s);
      case "readLog":
        res.writeHead(200, { "content-type": "application/octet-stream" });
        res.end(Buffer.concat(t.log));
        return;
      case "suspendSession": {
        const to = (call.body as BodyOf<typeof HttpApi.suspendSession>).warm ? "suspended_warm" : "suspended_cold";
        if (gw.slowRunner) return answerPending(res, s, to === "suspended_warm" ? "suspend_warm" : "suspend_cold", to);
        return moveTo(res, s, to);
      }
      case "resumeSession":
        if (gw.slowRunner && s.state === "suspended_warm") return answerPending(res, s, "resume_warm", "running");
        // A warm session wakes in place; anything else resumes by queueing again (which only a cold one may).
        return moveTo(res, s, s.state === "suspended_warm" ? "running" : "queued");
      case "snapshotSession": {
        if (!gw.slowRunner) return send(res, 200, checkpointOf(s));
        const requestId = `req_${String(slow.size + 1)}`;
        slow.set(s.id, { op: "snapshot", requestId, to: s.state, reads: gw.slowRunner.reads, ...(gw.slowRunner.refuse === undefined ? {} : { refuse: gw.slowRunner.refuse }) });
        res.setHeader("location", `/v1/sessions/${s.id}/snapshots/${requestId}`);
        return send(res, 202, { sessionId: s.id, requestId, status: "pending" });
      }
      case "getSnapshot": {
        const op = slow.get(s.id);
        const { requestId } = call.params as { requestId: string };
        if (op?.op !== "snapshot" || op.requestId !== requestId) return fail(res, 404, { code: "not_found", message: "snapshot request not found" });
        if (op.reads-- > 0) return send(res, 202, { sessionId: s.id, requestId, status: "pending" });
        slow.delete(s.id);
        if (op.refuse !== undefined) return fail(res, 409, { code: "conflict", message: `the runner refused: ${op.refuse}` });
        return send(res, 200, checkpointOf(s));
      }
      case "recycleSession": {
        s.state = "destroyed";
        seq += 1;
        const fresh = newSession(`s${String(seq)}`, seq, { spec: s.spec });
        terminals.set(fresh.id, terminalOf(fresh));
        return send(res, 201, { released: s, session: fresh });
      }
      case "restartApp": {
        const name = app ?? "";
        if (!appsOf(s.spec).some((a) => a.name === name)) return fail(res, 404, { code: "not_found", message: "app not found" });
        if (gw.restartPending) return send(res, 200, { ...s, pending: { op: "restart_app", requestId: "req_1", requestedAt: 1_700_000_000_000 } });
        const generation = (s.apps?.[name]?.generation ?? 1) + 1;
        s.apps = { ...s.apps, [name]: { generation, phase: "running", trigger: "manual", startedAt: 1_700_000_000_000 } };
        return send(res, 200, s);
      }
    }
    fail(res, 404, { code: "not_found", message: "no such route in the fake" });
  }

  function checkpointOf(s: Session) {
    return { ref: `checkpoints/default/${s.id}-1`, format: "tar+gzip", capabilities: ["portable"] };
  }

  /** The record with the operation pending, as the API answers it when the runner is slower than its wait. */
  function answerPending(res: ServerResponse, s: Session, op: PendingOp["op"], to: SessionState): void {
    if (!canTransition(s.state, to)) return fail(res, 409, { code: "conflict", message: `session is ${s.state}` });
    const requestId = `req_${String(slow.size + 1)}`;
    const slowRunner = gw.slowRunner ?? { reads: 0 };
    slow.set(s.id, { op, requestId, to, reads: slowRunner.reads, ...(slowRunner.refuse === undefined ? {} : { refuse: slowRunner.refuse }) });
    s.pending = { op, requestId, requestedAt: 1_700_000_000_000 };
    send(res, 200, s);
  }

  /** A state change the contract's state machine allows, or the scheduler's conflict. */
  function moveTo(res: ServerResponse, s: Session, to: SessionState): void {
    if (!canTransition(s.state, to)) return fail(res, 409, { code: "conflict", message: `session is ${s.state}` });
    s.state = to;
    send(res, 200, s);
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

function newSession(id: string, seq: number, body: Pick<BodyOf<typeof HttpApi.createSession>, "spec"> & Partial<BodyOf<typeof HttpApi.createSession>>): Session {
  const at = 1_700_000_000_000 + seq;
  return makeSession({
    id,
    ...(body.name !== undefined ? { name: body.name } : {}),
    ...(body.environmentId !== undefined ? { environmentId: body.environmentId } : {}),
    ...(body.parentId !== undefined ? { parentId: body.parentId } : {}),
    ...(body.idempotencyKey !== undefined ? { idempotencyKey: body.idempotencyKey } : {}),
    spec: body.spec,
    mode: body.mode ?? "run",
    oneShot: body.oneShot ?? false,
    runnerId: "runner-1",
    createdAt: at,
    updatedAt: at,
    lastFact: { eventId: `e${String(seq)}`, action: "create", actorId: "dev", at: 1_700_000_000_000 },
  });
}

function sendText(ws: WebSocket, frame: ServerFrame): void {
  ws.send(JSON.stringify(frame));
}

function sendExit(ws: WebSocket, code: number | null): void {
  sendText(ws, { type: "exit", app: "main", code });
  ws.close(1000);
}
