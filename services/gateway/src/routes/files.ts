/**
 * GET, PUT and DELETE /v1/sessions/:id/files and GET …/files/list, carried
 * out by the runner that holds the session (docs/workspace.md, Files). A
 * file's bytes past one small message go on the runner's data plane; smaller
 * ones inline on the bus, and where no data plane can be dialled, larger ones
 * through a sealed object of `transfers`. A call of a caller that found the
 * session held before asks the runner beside its authorization
 * (placement-hints.ts).
 */
import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import { newSealKey } from "@paddock/archive";
import { callRpc, callRpcWithBytes, decodeJson } from "@paddock/bus";
import {
  errorFromBody,
  FILE_CONTENT_TYPE,
  FILE_WRITE_OUTCOME_MAX_BYTES,
  fileListOf,
  FileWriteOutcome,
  HttpApi,
  transferObjectName,
  UnavailableError,
  ConflictError,
  workspaceRpcs,
  type ByteRange,
  type FileWriteReply,
  type Session,
} from "@paddock/contracts";
import { Action } from "../auth/auth.ts";
import { copyExactly, sendForAnswer, type DataPlaneDialer } from "./data-plane.ts";
import { heldPlacement, PlacementHints, type Placement } from "./placement-hints.ts";
import { boundedBody, targetOf, workspaceCalls } from "./workspace-calls.ts";
import type { GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";

/**
 * The one range of a `Range: bytes=` header (`first-last`, `first-`, `-suffix`);
 * undefined for none, several, or one that does not parse: the whole file is
 * answered then, as RFC 9110 lets a server do.
 */
export function parseByteRange(header: string | undefined): ByteRange | undefined {
  const m = header === undefined ? null : /^bytes=(\d{0,15})-(\d{0,15})$/.exec(header.trim());
  if (!m) return undefined;
  const [, first = "", last = ""] = m;
  if (first === "") return last === "" || Number(last) === 0 ? undefined : { suffix: Number(last) };
  if (last !== "" && Number(last) < Number(first)) return undefined;
  return { first: Number(first), ...(last !== "" ? { last: Number(last) } : {}) };
}

/** Files up to this size are read whole in the gateway before the answer starts (larger ones stream). */
const WHOLE_READ_MAX_BYTES = 4 * 1024 * 1024;
/** The most bytes of a file read that go inline when the rest may come on the runner's data plane. */
const DATA_INLINE_MAX_BYTES = 64 * 1024;

const runnerKey = (held: Placement) => `${held.poolId}/${held.runnerId}`;
const targetFor = ({ sessionId, workspaceId, placementGeneration }: Placement) => ({ sessionId, workspaceId, placementGeneration });

export function fileRoutes(ctx: GatewayContext, dialer: DataPlaneDialer): Route[] {
  const calls = workspaceCalls(ctx);
  const { rpcOpts } = calls;
  const hints = new PlacementHints();

  /** Writes need a running session: a warm-suspended one is read (without waking it), not written. */
  const writable = (session: Session) => {
    if (session.state !== "running") throw new ConflictError(`session is ${session.state}: resume it to write its files`);
  };

  /**
   * A read asked of held's runner; its transfer object (when the bytes go
   * that way) is name, and its data-plane connection (when they come on it,
   * and it can be dialled) is dialled as soon as the answer comes.
   */
  const askRead = (held: Placement, query: { path: string }, range: ByteRange | undefined, key: Buffer, via: "bus" | "data") => {
    const transferId = ctx.deps.newId();
    const inlineMaxBytes = via === "data" ? Math.min(DATA_INLINE_MAX_BYTES, calls.inlineLimit()) : calls.inlineLimit();
    const request = { ...targetFor(held), path: query.path, transferId, sealKey: key.toString("base64"), inlineMaxBytes, via, ...(range ? { range } : {}) };
    const answer = callRpcWithBytes(ctx.deps.nc, workspaceRpcs(held.poolId, held.runnerId).read, request, new Uint8Array(0), rpcOpts);
    const socket = answer.then(({ result }) => (result.data ? dialer.dial(runnerKey(held), result.data) : undefined));
    socket.catch(() => undefined);
    return { name: transferObjectName(held.workspaceId, held.sessionId, transferId), answer, socket };
  };
  type ReadAsk = ReturnType<typeof askRead>;
  /** An early read not used: its connection closed, its object (if the runner stored one) removed. */
  const discardRead = (ask: ReadAsk) =>
    void Promise.all([ask.answer, ask.socket]).then(([{ result: r }, socket]) => {
      socket?.destroy();
      if (r.inline !== true && !r.unsatisfiable && !r.data) void calls.removeQuietly(ask.name);
    }, () => undefined);

  /**
   * A data-plane write's connection: the runner's offer, dialled as soon as
   * it comes (the runner touches the workspace only once bytes come). null
   * when the runner has no data plane, or it cannot be dialled.
   */
  const openWrite = async (held: Placement, query: { path: string; mode: number }, size: number): Promise<Socket | null> => {
    const { result } = await callRpcWithBytes(ctx.deps.nc, workspaceRpcs(held.poolId, held.runnerId).write, { ...targetFor(held), path: query.path, mode: query.mode, data: { size } }, new Uint8Array(0), rpcOpts);
    if (!("data" in result)) throw new UnavailableError("the runner answered a data-plane write without its offer; retry");
    if (result.data === null) dialer.shun(runnerKey(held));
    return (result.data && (await dialer.dial(runnerKey(held), result.data))) ?? null;
  };
  const askWrite = (held: Placement, query: { path: string; mode: number }, size: number) => {
    const opened = openWrite(held, query, size);
    opened.catch(() => undefined);
    return opened;
  };
  /** An early write not used: its connection closed before a byte, so the runner does nothing. */
  const discardWrite = (opened: Promise<Socket | null>) => void opened.then((socket) => socket?.destroy(), () => undefined);

  /**
   * The early ask of a call (the caller's hint) while authorized() runs, and
   * the one to use once it did: the early one while the session is still
   * held there, else none (the caller asks afresh). Let go when it is not
   * used, and when authorized() fails: nothing of it outlives the call.
   */
  const authorizedWithEarly = async <T>(tokenHash: string, sessionId: string, ask: (held: Placement) => T | undefined, discard: (t: T) => void, authorized: () => Promise<Session>) => {
    const hint = hints.get(tokenHash, sessionId);
    const asked = hint ? ask(hint) : undefined;
    let session: Session;
    try {
      session = await authorized();
    } catch (err) {
      if (asked !== undefined) discard(asked);
      throw err;
    }
    hints.remember(tokenHash, session);
    if (asked !== undefined && hint && PlacementHints.holds(hint, session)) return { session, early: asked };
    if (asked !== undefined) discard(asked);
    return { session, early: undefined };
  };

  /**
   * A file write whose bytes go on the runner's data plane (the declared
   * length of them, then a half-close); its outcome comes back on the same
   * connection. The body is `whole` when it is read into memory meanwhile,
   * else streamed from req. taken() is called once the connection is open.
   * Undefined when the data plane cannot be dialled (nothing of a streamed
   * body read): the caller sends the bytes another way.
   */
  const writeOnDataPlane = async (opened: Promise<Socket | null>, req: IncomingMessage, size: number, whole: Promise<Buffer> | undefined, taken: () => void): Promise<FileWriteReply | undefined> => {
    const socket = await opened;
    if (!socket) return undefined;
    taken();
    let body: Iterable<Uint8Array> | AsyncIterable<Uint8Array>;
    try {
      body = whole ? [await whole] : (boundedBody(req, size) as unknown as AsyncIterable<Uint8Array>);
    } catch (err) {
      // The client's body did not come whole: the runner, short of bytes, leaves nothing of the file.
      socket.destroy();
      throw err;
    }
    const outcome = decodeJson(FileWriteOutcome, await sendForAnswer(socket, body, FILE_WRITE_OUTCOME_MAX_BYTES));
    if (!outcome.ok) throw new UnavailableError("the runner's answer to a write is malformed; retry");
    if (!outcome.value.ok) throw errorFromBody(outcome.value.error);
    return outcome.value.result;
  };

  return [
    ctx.serveSession(HttpApi.readFile, async ({ caller: { scope, tokenHash }, params, query, req, res }) => {
      const range = parseByteRange(req.headers.range);
      const key = newSealKey();
      // Asked early only on the data plane.
      const { session, early } = await authorizedWithEarly(
        tokenHash,
        params.id,
        (hint) => (dialer.usable(runnerKey(hint)) ? askRead(hint, query, range, key, "data") : undefined),
        discardRead,
        async () => (await calls.authorized(scope, params.id, Action.readFiles, "read", req)).session,
      );
      const held = heldPlacement(session);
      const runner = runnerKey(held);
      let ask = early ?? askRead(held, query, range, key, dialer.usable(runner) ? "data" : "bus");
      // Nothing to remove afterwards when the runner stored no object (inline bytes, the data plane's, or none at all).
      let stored = true;
      try {
        let answer = await ask.answer;
        // The runner's data plane not reachable from here: the bytes come through the transfer store instead.
        const socket = await ask.socket;
        if (answer.result.data && !socket) {
          ask = askRead(held, query, range, key, "bus");
          answer = await ask.answer;
        }
        const read = answer.result;
        stored = read.inline !== true && !read.unsatisfiable && !socket;
        if (read.unsatisfiable) {
          res.writeHead(416, { "content-type": "application/json", "content-range": `bytes */${read.size}` });
          res.end(JSON.stringify({ error: { code: "invalid", message: `the range starts past the end of the file (${read.size} bytes)` } }));
          return;
        }
        const length = read.end - read.start + 1;
        const partial = range ? { "content-range": `bytes ${read.start}-${read.end}/${read.size}` } : {};
        const head = { "content-type": FILE_CONTENT_TYPE, "content-length": String(length), "accept-ranges": "bytes", "cache-control": "no-store", ...partial };
        if (socket) {
          res.writeHead(range ? 206 : 200, head);
          await copyExactly(socket, res, length).catch((err: unknown) => ctx.deps.log.warn({ err, sessionId: session.id }, "file read cut short"));
          return;
        }
        if (read.inline === true) {
          const bytes = answer.bytes;
          if (bytes.byteLength !== length) throw new UnavailableError(`the runner answered ${bytes.byteLength} of ${length} bytes; retry`);
          res.writeHead(range ? 206 : 200, head);
          res.end(bytes);
          return;
        }
        // A small file is read whole before the answer starts: a failed read of the object is retried, or a clean 503, never a cut body.
        if (length <= WHOLE_READ_MAX_BYTES) {
          const bytes = await calls.readWhole(ask.name, key, length);
          res.writeHead(range ? 206 : 200, head);
          res.end(bytes);
          return;
        }
        const got = await (await calls.transfers()).get(ask.name);
        if (!got) throw new UnavailableError("the runner's copy of the file is gone; retry");
        res.writeHead(range ? 206 : 200, head);
        await calls.streamUnsealed(got, key, ask.name, res, session.id);
      } finally {
        if (stored) await calls.removeQuietly(ask.name);
      }
    }),

    ctx.serveSession(HttpApi.writeFile, async ({ caller: { scope, tokenHash }, params, query, req }) => {
      calls.refuseDeclaredTooLarge(req);
      const declared = req.headers["content-length"] === undefined ? undefined : Number(req.headers["content-length"]);
      // Past one small message, a body of declared length goes on the runner's data plane when it can be dialled.
      const onDataPlane = (runner: string) => declared !== undefined && declared > DATA_INLINE_MAX_BYTES && dialer.usable(runner);
      // A body that fits one message is read whole meanwhile: in hand whichever way it then goes.
      const whole = declared !== undefined && declared <= calls.inlineLimit() ? calls.wholeBody(req, declared) : undefined;
      whole?.catch(() => undefined);
      const { session, early } = await authorizedWithEarly(
        tokenHash,
        params.id,
        (hint) => (onDataPlane(runnerKey(hint)) ? askWrite(hint, query, declared ?? 0) : undefined),
        discardWrite,
        async () => {
          const { session: found } = await calls.authorized(scope, params.id, Action.writeFiles, "write", req);
          writable(found);
          return found;
        },
      );
      const held = heldPlacement(session);
      const rpcs = workspaceRpcs(held.poolId, held.runnerId);
      const runner = runnerKey(held);
      const opened = early ?? (onDataPlane(runner) ? askWrite(held, query, declared ?? 0) : undefined);
      // Each write is a fact (one audit event, fixed fields only: no path, no content), committed beside the write's
      // bytes once the runner has them coming, and before the client is told (as an exec's is beside its start).
      let fact: Promise<unknown> | undefined;
      const taken = () => void (fact ??= calls.recordFact(scope, session.id, "file.write"));
      const write = async (bytes: { inline: Uint8Array } | { transferId: string; sealKey: string }): Promise<FileWriteReply> => {
        const request = { ...targetFor(held), path: query.path, mode: query.mode, ...("inline" in bytes ? { inline: true as const } : bytes) };
        taken();
        const { result } = await callRpcWithBytes(ctx.deps.nc, rpcs.write, request, "inline" in bytes ? bytes.inline : new Uint8Array(0), rpcOpts);
        if ("data" in result) throw new UnavailableError("the runner offered its data plane for a write on the bus; retry");
        return result;
      };
      try {
        // Else a body that fits one message goes inline, and a larger one, or one of unknown length, through a transfer object.
        const onData = opened ? await writeOnDataPlane(opened, req, declared ?? 0, whole, taken) : undefined;
        const reply = onData ?? (whole ? await write({ inline: await whole }) : await calls.uploaded(req, session, write));
        taken();
        await fact;
        return { status: 200, body: reply };
      } catch (err) {
        // The write's own error is the answer; a fact under way settles on its own.
        fact?.catch(() => undefined);
        throw err;
      }
    }),

    ctx.serveSession(HttpApi.deleteFile, async ({ caller: { scope }, params, query, req }) => {
      const { session, rpcs } = await calls.authorized(scope, params.id, Action.writeFiles, "write", req);
      writable(session);
      const reply = await callRpc(ctx.deps.nc, rpcs.delete, { ...targetOf(session), path: query.path, recursive: query.recursive }, rpcOpts);
      await calls.recordFact(scope, session.id, "file.delete");
      return { status: 200, body: reply };
    }),

    ctx.serveSession(HttpApi.listFiles, async ({ caller: { scope }, params, query, req }) => {
      const { session, rpcs } = await calls.authorized(scope, params.id, Action.readFiles, "read", req);
      return { status: 200, body: fileListOf(await callRpc(ctx.deps.nc, rpcs.list, { ...targetOf(session), path: query.path ?? "", depth: query.depth }, rpcOpts)) };
    }),
  ];
}
