import type { IncomingMessage, ServerResponse } from "node:http";
import { callRpc } from "@paddock/bus";
import {
  Api,
  ConflictError,
  DEFAULT_EXEC_TIMEOUT_MS,
  EXEC_OUTPUT_CAP_BYTES,
  EXEC_STDIN_PIECE_BYTES,
  execRpcs,
  HttpApi,
  MAX_EXEC_STDIN_BYTES,
  NDJSON,
  Streams,
  Subjects,
  TooLargeError,
  type ExecBody,
  type ExecDone,
  type ExecEncoding,
  ExecExit,
  Headers,
  type ExecFrame,
  type ExecResult,
  type Scope,
  type Session,
} from "@paddock/contracts";
import { Action, type Principal } from "../auth/auth.ts";
import type { StreamGuard } from "../auth/revocation.ts";
import { realEvery, sessionResource, type GatewayContext } from "../context.ts";
import { drainOrClose, readBodyBytes, type Route } from "../http/http.ts";
import { readRange } from "../terminal/termlog.ts";
import { ExecOutput, type ExecOutputItem } from "./exec-output.ts";
import { heldPlacement } from "./placement-hints.ts";
import { startedForUse, wakeForUse } from "./wake.ts";
import { Utf8Stream } from "./utf8-stream.ts";

/** The session's holder as an exec call reaches it. */
interface Held {
  session: Session;
  runner: { poolId: string; runnerId: string };
  rpcs: ReturnType<typeof execRpcs>;
  target: { sessionId: string; workspaceId: string; placementGeneration: number };
}

/**
 * How long a buffered exec's start waits for the command to end and answer
 * inline (ExecStartRequest.inlineWaitMs): past it the answer comes through
 * the log as for any longer command, at the cost of one reader made then.
 */
const EXEC_INLINE_WAIT_MS = 500;

/** Frames one cursor read answers at most (the next read goes on from its cursor). */
const MAX_READ_FRAMES = 256;

/** Output bytes as a frame's text: UTF-8 decoded per stream (a sequence split across chunks is kept whole), or base64. */
class FrameText {
  private readonly decoders = { stdout: new Utf8Stream(), stderr: new Utf8Stream() };
  constructor(readonly encoding: ExecEncoding) {}
  text(stream: "stdout" | "stderr", bytes: Uint8Array): string {
    return this.encoding === "base64" ? Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64") : this.decoders[stream].decode(bytes);
  }
  rest(stream: "stdout" | "stderr"): string {
    return this.encoding === "base64" ? "" : this.decoders[stream].end();
  }
}

function frameOf(item: ExecOutputItem, text: FrameText): ExecFrame {
  if (item.kind === "chunk") return item.stream === "stdout" ? { stdout: text.text("stdout", item.bytes) } : { stderr: text.text("stderr", item.bytes) };
  if (item.kind === "exit") return { exit: item.exit };
  return { error: { code: "unavailable", message: item.reason } };
}

/** The buffered answer of a command the runner answered inline (ExecDone: at most EXEC_INLINE_MAX_BYTES, under the cap). */
function inlineResult(execId: string, done: ExecDone, encoding: ExecEncoding): ExecResult {
  const text = (b64: string) => (encoding === "base64" ? b64 : Buffer.from(b64, "base64").toString("utf8"));
  return { id: execId, ...done.exit, stdout: text(done.stdout), stderr: text(done.stderr), truncated: false, encoding };
}

function wantsNdjson(req: IncomingMessage): boolean {
  return (req.headers.accept ?? "").split(",").some((t) => t.trim().split(";")[0] === NDJSON);
}

/**
 * POST /v1/sessions/:id/exec and the background processes' routes, carried
 * out by the runner that holds the session (exec.ts in the contracts). The
 * exec route reads the process's EXEC log while it runs, crediting the
 * runner as it forwards; a client that leaves before the exit takes the
 * command with it (SIGKILL to its process group).
 */
export function execRoutes(ctx: GatewayContext, guard: StreamGuard): Route[] {
  const { config } = ctx.deps;
  const rpcOpts = { timeoutMs: config.workspaceRpcTimeoutMs };
  const every = ctx.deps.every ?? realEvery;

  /** The session's holder for action; `wake`: a suspended session is resumed first (an exec wakes it). */
  const held = async (scope: Scope, sessionId: string, action: Action, wake = false, req?: IncomingMessage): Promise<Held> => {
    const found = await ctx.getSession(scope, sessionId, req);
    await ctx.authorizer.authorize(scope, action, sessionResource(found));
    const session = wake ? await wakeForUse(ctx, scope, await startedForUse(ctx, scope, found, req?.socket)) : found;
    const { poolId, runnerId, ...target } = heldPlacement(session);
    return { session, runner: { poolId, runnerId }, rpcs: execRpcs(poolId, runnerId), target };
  };

  /** Writes bytes to a process's stdin in pieces one bus message carries; eof closes it after the last. */
  const writeStdin = async (h: Held, execId: string, bytes: Buffer, eof: boolean): Promise<number> => {
    let written = 0;
    for (let at = 0; at < bytes.length || (at === 0 && eof); at += EXEC_STDIN_PIECE_BYTES) {
      const piece = bytes.subarray(at, at + EXEC_STDIN_PIECE_BYTES);
      const last = at + EXEC_STDIN_PIECE_BYTES >= bytes.length;
      const reply = await callRpc(ctx.deps.nc, h.rpcs.input, { ...h.target, execId, data: piece.toString("base64"), eof: eof && last }, rpcOpts);
      written += reply.written;
      if (bytes.length === 0) break;
    }
    return written;
  };

  /**
   * Starts a command: `background` answers at once; `stream` reads its log
   * from the start (the reader made while the runner starts it); `buffered`
   * asks the runner to answer the whole result with the start when the
   * command ends soon with little output (`done`), and reads the log only
   * when it did not.
   */
  const start = async (scope: Scope, sessionId: string, body: ExecBody, mode: "background" | "stream" | "buffered", req: IncomingMessage) => {
    const h = await held(scope, sessionId, Action.exec, true, req);
    if (h.session.state !== "running") throw new ConflictError(`session is ${h.session.state}: resume it to exec`);
    const execId = ctx.deps.newId();
    const stdin = body.stdin === undefined ? Buffer.alloc(0) : Buffer.from(body.stdin, body.encoding === "base64" ? "base64" : "utf8");
    const background = mode === "background";
    const timeoutMs = body.timeoutMs ?? (background ? undefined : DEFAULT_EXEC_TIMEOUT_MS);
    // Stdin past one message's piece follows the start in pieces (writeStdin), the last one closing it.
    const inline = stdin.length <= EXEC_STDIN_PIECE_BYTES;
    const keepStdinOpen = !inline || (background && body.stdin === undefined);
    const inlineWaitMs = mode === "buffered" && inline ? Math.min(EXEC_INLINE_WAIT_MS, timeoutMs ?? EXEC_INLINE_WAIT_MS) : undefined;
    const request = { ...h.target, execId, cmd: body.cmd, cwd: body.cwd ?? "", env: body.env ?? {}, stdin: inline ? stdin.toString("base64") : "", keepStdinOpen, attached: !background, ...(timeoutMs !== undefined ? { timeoutMs } : {}), ...(inlineWaitMs !== undefined ? { inlineWaitMs } : {}) };
    const openOutput = () => ExecOutput.open({ nc: ctx.deps.nc, every, ...h.runner, sessionId: h.session.id, execId, attached: true });
    let opening = mode === "stream" ? openOutput() : undefined;
    const kill = () => void callRpc(ctx.deps.nc, h.rpcs.signal, { ...h.target, execId, signal: "SIGKILL" }, rpcOpts).catch(() => undefined);
    // One audit event per exec call, fixed fields only (no command, no output), committed beside the start
    // and before any answer: a failure to commit is the answer (the command, if it started, is killed).
    const audited = callRpc(ctx.deps.nc, Api.recordTransfer, { scope, sessionId: h.session.id, direction: "exec" }, { timeoutMs: config.rpcTimeoutMs });
    const [started, audit] = await Promise.allSettled([callRpc(ctx.deps.nc, h.rpcs.start, request, { timeoutMs: rpcOpts.timeoutMs + (inlineWaitMs ?? 0) }), audited]);
    if (started.status === "rejected" || audit.status === "rejected") {
      if (started.status === "fulfilled" && started.value.done === undefined) kill();
      void opening?.then((o) => o.close(), () => undefined);
      throw started.status === "rejected" ? started.reason : audit.status === "rejected" ? audit.reason : undefined;
    }
    if (!inline) await writeStdin(h, execId, stdin, true);
    const done = started.value.done;
    if (mode === "buffered" && done === undefined) opening = openOutput();
    try {
      return { execId, output: await opening, done, kill, session: h.session };
    } catch (err) {
      // No reader: the command would wait for credit until its reader timeout; it goes now.
      kill();
      throw err;
    }
  };

  /**
   * Runs fn while the caller's token and membership hold: revoked or removed
   * meanwhile, the answer is cut (never ended: the client must not take it as
   * complete) and the command, when it is this call's, killed.
   */
  const guarded = async <T>(principal: Principal, session: Session, action: Action, res: ServerResponse, kill: (() => void) | undefined, fn: () => Promise<T>): Promise<T> => {
    await guard.ready();
    const stream = {
      tokenHash: principal.tokenHash,
      revoke: () => {
        kill?.();
        res.destroy();
      },
    };
    guard.add(stream, principal, (scope) => ctx.authorizer.authorize(scope, action, sessionResource(session)));
    try {
      return await fn();
    } finally {
      guard.remove(stream);
    }
  };

  /** Streams frames as the output comes; a client gone before the exit kills the command. */
  const streamFrames = async (output: ExecOutput, res: ServerResponse, text: FrameText, kill: () => void) => {
    let ended = false;
    const onClose = () => {
      if (!ended) kill();
      void output.close();
    };
    res.once("close", onClose);
    res.writeHead(200, { "content-type": NDJSON, "cache-control": "no-store", "x-content-type-options": "nosniff" });
    res.flushHeaders();
    for await (const item of output.items()) {
      if (res.destroyed) break;
      if (item.kind !== "chunk") {
        for (const stream of ["stdout", "stderr"] as const) {
          const rest = text.rest(stream);
          if (rest) res.write(JSON.stringify(stream === "stdout" ? { stdout: rest } : { stderr: rest }) + "\n");
        }
        ended = true;
      }
      if (!res.write(JSON.stringify(frameOf(item, text)) + "\n")) await drainOrClose(res);
      if (item.kind === "chunk") output.take(item.bytes.byteLength);
    }
    res.off("close", onClose);
    if (!res.destroyed) res.end();
  };

  /** Gathers stdout and stderr up to the cap each (the rest is read, credited and dropped) until the exit. */
  const buffered = async (output: ExecOutput, req: IncomingMessage, execId: string, encoding: ExecEncoding, kill: () => void): Promise<ExecResult> => {
    const parts = { stdout: [] as Uint8Array[], stderr: [] as Uint8Array[] };
    const sizes = { stdout: 0, stderr: 0 };
    let truncated = false;
    let exit: ExecExit | undefined;
    let lost: string | undefined;
    const onClose = () => {
      if (exit === undefined) kill();
      void output.close();
    };
    req.socket.once("close", onClose);
    try {
      for await (const item of output.items()) {
        if (item.kind === "exit") exit = item.exit;
        else if (item.kind === "lost") lost = item.reason;
        else {
          const room = EXEC_OUTPUT_CAP_BYTES - sizes[item.stream];
          if (item.bytes.byteLength > room) truncated = true;
          if (room > 0) parts[item.stream].push(item.bytes.subarray(0, room));
          sizes[item.stream] += Math.min(room, item.bytes.byteLength);
          output.take(item.bytes.byteLength);
        }
      }
    } finally {
      req.socket.off("close", onClose);
    }
    if (!exit) throw new ConflictError(lost ?? "the exec ended without an exit");
    const text = (stream: "stdout" | "stderr") => {
      const bytes = Buffer.concat(parts[stream]);
      return encoding === "base64" ? bytes.toString("base64") : bytes.toString("utf8");
    };
    return { id: execId, ...exit, stdout: text("stdout"), stderr: text("stderr"), truncated, encoding };
  };

  return [
    ctx.serveSession(HttpApi.exec, async ({ caller, params, body: readBody, req, res }) => {
      const body = await readBody();
      const mode = body.background === true ? "background" : wantsNdjson(req) ? "stream" : "buffered";
      const { execId, output, done, kill, session } = await start(caller.scope, params.id, body, mode, req);
      const encoding = body.encoding ?? "utf8";
      if (done) return { status: 200, body: inlineResult(execId, done, encoding) };
      if (!output) return { status: 202, body: { id: execId } };
      // Gone while the command started: nothing will read it.
      if (req.socket.destroyed) {
        kill();
        void output.close();
        return;
      }
      return guarded(caller, session, Action.exec, res, kill, async () => {
        if (wantsNdjson(req)) {
          await streamFrames(output, res, new FrameText(encoding), kill);
          return;
        }
        return { status: 200, body: await buffered(output, req, execId, encoding, kill) };
      });
    }),

    ctx.serve(HttpApi.listProcesses, async ({ caller: { scope }, params }) => {
      const h = await held(scope, params.id, Action.readProcesses);
      return { status: 200, body: await callRpc(ctx.deps.nc, h.rpcs.list, h.target, rpcOpts) };
    }),

    ctx.serve(HttpApi.readProcessOutput, async ({ caller, params, query, req, res }) => {
      const h = await held(caller.scope, params.id, Action.readProcesses);
      const text = new FrameText(query.encoding ?? "utf8");
      if (wantsNdjson(req)) {
        const output = await ExecOutput.open({ nc: ctx.deps.nc, every, ...h.runner, sessionId: h.session.id, execId: params.processId, attached: false, fromSeq: query.since + 1 });
        await guarded(caller, h.session, Action.readProcesses, res, undefined, () => streamFrames(output, res, text, () => undefined));
        return;
      }
      const frames: ExecFrame[] = [];
      let cursor = query.since;
      let ended = false;
      const subject = Subjects.exec(h.runner.poolId, h.runner.runnerId, h.session.id, params.processId);
      for await (const m of readRange(await ctx.jsm(), Streams.exec, subject, query.since + 1)) {
        if (frames.length === MAX_READ_FRAMES) break;
        cursor = m.seq;
        const exit = m.header?.get(Headers.execExit);
        const parsed = exit ? ExecExit.safeParse(m.json()) : undefined;
        const item: ExecOutputItem = parsed
          ? parsed.success ? { kind: "exit", exit: parsed.data } : { kind: "lost", reason: "the process's exit did not parse" }
          : { kind: "chunk", stream: m.header?.get(Headers.stream) === "stderr" ? "stderr" : "stdout", bytes: m.data };
        frames.push(frameOf(item, text));
        if (exit) {
          ended = true;
          break;
        }
      }
      return { status: 200, body: { frames, cursor: String(cursor), ended, encoding: text.encoding } };
    }),

    ctx.serve(HttpApi.writeProcessStdin, async ({ caller: { scope }, params, query, req }) => {
      const declared = Number(req.headers["content-length"] ?? 0);
      if (declared > MAX_EXEC_STDIN_BYTES) throw new TooLargeError(`stdin exceeds ${MAX_EXEC_STDIN_BYTES} bytes`);
      const h = await held(scope, params.id, Action.exec);
      return { status: 200, body: { written: await writeStdin(h, params.processId, await readBodyBytes(req, MAX_EXEC_STDIN_BYTES, "stdin"), query.eof) } };
    }),

    ctx.serve(HttpApi.signalProcess, async ({ caller: { scope }, params, body: readBody }) => {
      const { signal } = await readBody();
      const h = await held(scope, params.id, Action.exec);
      return { status: 200, body: await callRpc(ctx.deps.nc, h.rpcs.signal, { ...h.target, execId: params.processId, signal }, rpcOpts) };
    }),
  ];
}
