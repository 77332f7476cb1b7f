import type { IncomingMessage, ServerResponse } from "node:http";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { Objm, type ObjectResult, type ObjectStore } from "@nats-io/obj";
import { newSealKey, SealError, sealed, unsealed } from "@paddock/archive";
import { callRpc, callRpcWithBytes, decodeJson } from "@paddock/bus";
import {
  Api,
  errorFromBody,
  FILE_WRITE_OUTCOME_MAX_BYTES,
  FileWriteOutcome,
  type FileWriteReply,
  ARCHIVE_CONTENT_TYPE,
  type ByteRange,
  ConflictError,
  FILE_CONTENT_TYPE,
  fileListOf,
  inlineBytesFor,
  HttpApi,
  ObjectStores,
  TooLargeError,
  transferObjectName,
  transferRef,
  UnavailableError,
  workspaceRpcs,
  type Scope,
  type TransferDirection,
  type Session,
} from "@paddock/contracts";
import { Action } from "../auth/auth.ts";
import { copyExactly, sendForAnswer, type DataPlaneDialer } from "./data-plane.ts";
import { wakeForUse } from "./wake.ts";
import { sessionResource, type GatewayContext } from "../context.ts";
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

/** States in which the session has a sandbox on a runner to read or write. */
const LIVE: ReadonlySet<Session["state"]> = new Set(["running", "suspended_warm"]);

/** The runner that holds a live session; conflict when there is no sandbox to act on. */
function holder(session: Session): { poolId: string; runnerId: string } {
  if (!LIVE.has(session.state) || session.poolId === undefined || session.runnerId === undefined) {
    throw new ConflictError(`session is ${session.state}: it has no live sandbox`);
  }
  return { poolId: session.poolId, runnerId: session.runnerId };
}

/**
 * The request body as a web stream of at most max bytes, read as the
 * consumer pulls (never buffered whole). Past max the stream errors with
 * too_large and reading stops; the connection is then closed.
 */
export function boundedBody(req: IncomingMessage, max: number): ReadableStream<Uint8Array> {
  const chunks = req[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  let seen = 0;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const next = await chunks.next();
        if (next.done) {
          controller.close();
          return;
        }
        seen += next.value.length;
        if (seen > max) throw new TooLargeError(`upload exceeds ${max} bytes`);
        controller.enqueue(new Uint8Array(next.value.buffer, next.value.byteOffset, next.value.byteLength));
      },
    },
    { highWaterMark: 0 },
  );
}

/**
 * PUT and GET /v1/sessions/:id/workspace?path=, GET /v1/sessions/:id/diff and /repos,
 * carried out by the runner that holds the session. Archives pass through
 * object store `transfers` in chunks; the gateway deletes each object it
 * made once the transfer is over. Each: authenticate → validate → fetch the
 * session → authorize on the current membership → act.
 */
/** The most bytes of a file read that go inline when the rest may come on the runner's data plane. */
const DATA_INLINE_MAX_BYTES = 64 * 1024;

export function workspaceRoutes(ctx: GatewayContext, dialer: DataPlaneDialer): Route[] {
  const { config } = ctx.deps;
  let opening: Promise<ObjectStore> | undefined;
  const transfers = (): Promise<ObjectStore> => {
    opening ??= new Objm(ctx.deps.nc).open(ObjectStores.transfers).catch((err: unknown) => {
      opening = undefined;
      throw err;
    });
    return opening;
  };
  const rpcOpts = { timeoutMs: config.workspaceRpcTimeoutMs };

  /**
   * The session, authorized for action, woken when the call needs it (wake on
   * use: writes wake a warm or cold session, reads a cold one only; a warm
   * one is read as it is, without waking it).
   */
  const authorized = async (scope: Scope, sessionId: string, action: Action, wake: "write" | "read") => {
    const found = await ctx.getSession(scope, sessionId);
    await ctx.authorizer.authorize(scope, action, sessionResource(found));
    const session = wake === "write" || found.state === "suspended_cold" ? await wakeForUse(ctx, scope, found) : found;
    const { poolId, runnerId } = holder(session);
    return { session, rpcs: workspaceRpcs(poolId, runnerId) };
  };

  /** Writes need a running session: a warm-suspended one is read (without waking it), not written. */
  const writable = (session: Session) => {
    if (session.state !== "running") throw new ConflictError(`session is ${session.state}: resume it to write its files`);
  };

  const target = (session: Session) => ({ sessionId: session.id, workspaceId: session.workspaceId, placementGeneration: session.placementGeneration });

  /** The object's bytes, unsealed, as the response's body; a response that cannot be whole is cut, never ended. */
  const streamUnsealed = async (got: ObjectResult, key: Buffer, name: string, res: ServerResponse, sessionId: string) => {
    try {
      await pipeline(unsealed(Readable.fromWeb(got.data as NodeWebReadableStream<Uint8Array>), key, transferRef(name)), res);
    } catch (err) {
      // The object did not open (replaced or cut in the store), or the client left: it must not keep half of it.
      if (err instanceof SealError) ctx.deps.log.warn({ err, sessionId }, "transfer object did not open; response aborted");
      res.destroy();
      return;
    }
    // A digest mismatch is only known at the end: the client must not keep corrupt bytes.
    if (await got.error) res.destroy();
  };

  const removeQuietly = async (name: string) => {
    try {
      await (await transfers()).delete(name);
    } catch (err) {
      ctx.deps.log.warn({ err, object: name }, "transfer object not deleted; the store's TTL removes it");
    }
  };

  /** A body announced larger than an upload may be is refused before anything is read. */
  const refuseDeclaredTooLarge = (req: IncomingMessage) => {
    const declared = req.headers["content-length"];
    if (declared !== undefined && Number(declared) > config.maxUploadBytes) throw new TooLargeError(`upload exceeds ${config.maxUploadBytes} bytes`);
  };

  /** The request body (bounded) sealed into a transfer object for the session, handed to act; the object is removed after. */
  const uploaded = async <T>(req: IncomingMessage, session: Session, act: (transfer: { transferId: string; sealKey: string }) => Promise<T>): Promise<T> => {
    const transferId = ctx.deps.newId();
    const name = transferObjectName(session.workspaceId, session.id, transferId);
    const key = newSealKey();
    try {
      const body = sealed(Readable.fromWeb(boundedBody(req, config.maxUploadBytes) as NodeWebReadableStream<Uint8Array>), key, transferRef(name));
      await (await transfers()).put({ name }, Readable.toWeb(body) as unknown as ReadableStream<Uint8Array>);
      return await act({ transferId, sealKey: key.toString("base64") });
    } finally {
      await removeQuietly(name);
    }
  };

  /** The object's bytes, unsealed and checked whole (length and digest); one more read after a failed one, then 503. */
  const readWhole = async (name: string, key: Buffer, length: number): Promise<Buffer> => {
    let last: unknown;
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const got = await (await transfers()).get(name);
        if (!got) throw new UnavailableError("the runner's copy of the file is gone; retry");
        const parts: Buffer[] = [];
        for await (const part of unsealed(Readable.fromWeb(got.data as NodeWebReadableStream<Uint8Array>), key, transferRef(name))) parts.push(part as Buffer);
        const bytes = Buffer.concat(parts);
        const failed = await got.error;
        if (!failed && bytes.length === length) return bytes;
        last = failed ?? new Error(`read ${bytes.length} of ${length} bytes`);
      } catch (err) {
        if (err instanceof UnavailableError) throw err;
        last = err;
      }
      ctx.deps.log.warn({ err: last, object: name, attempt }, "transfer object read failed");
    }
    throw new UnavailableError("the file could not be read from the transfer store; retry", { cause: last });
  };

  /** The most bytes of a file that go inline: the configured bound, and what the server's max_payload lets one message carry. */
  const inlineLimit = () => Math.min(config.filesInlineMaxBytes, inlineBytesFor(ctx.deps.nc.info?.max_payload ?? 0));

  /** The request body whole (its length declared, at most max): the HTTP parser ends it at the declared length. */
  const wholeBody = async (req: IncomingMessage, max: number): Promise<Buffer> => {
    const parts: Buffer[] = [];
    for await (const part of boundedBody(req, max) as unknown as AsyncIterable<Uint8Array>) parts.push(Buffer.from(part));
    return Buffer.concat(parts);
  };

  /**
   * A file write whose bytes go on the runner's data plane (the request's
   * declared length of them, then a half-close); its outcome comes back on
   * the same connection. Undefined, with nothing read of the body, when the
   * data plane cannot be dialled: the caller sends the bytes another way.
   */
  const writeOnDataPlane = async (session: Session, runner: string, query: { path: string; mode: number }, req: IncomingMessage, size: number): Promise<FileWriteReply | undefined> => {
    const rpcs = workspaceRpcs(session.poolId ?? "", session.runnerId ?? "");
    const { result } = await callRpcWithBytes(ctx.deps.nc, rpcs.write, { ...target(session), path: query.path, mode: query.mode, data: { size } }, new Uint8Array(0), rpcOpts);
    if (!("data" in result)) throw new UnavailableError("the runner answered a data-plane write without its offer; retry");
    if (result.data === null) {
      dialer.shun(runner);
      return undefined;
    }
    const socket = await dialer.dial(runner, result.data);
    if (!socket) return undefined;
    const answer = await sendForAnswer(socket, boundedBody(req, size) as unknown as AsyncIterable<Uint8Array>, FILE_WRITE_OUTCOME_MAX_BYTES);
    const outcome = decodeJson(FileWriteOutcome, answer);
    if (!outcome.ok) throw new UnavailableError("the runner's answer to a write is malformed; retry");
    if (!outcome.value.ok) throw errorFromBody(outcome.value.error);
    return outcome.value.result;
  };

  /** A workspace fact committed on the record (one audit event) before the client is told. */
  const recordFact = (scope: Scope, sessionId: string, direction: TransferDirection) =>
    callRpc(ctx.deps.nc, Api.recordTransfer, { scope, sessionId, direction }, { timeoutMs: config.rpcTimeoutMs });

  return [
    ctx.serve(HttpApi.pushWorkspace, async ({ caller: { scope }, params, query, req }) => {
      refuseDeclaredTooLarge(req);
      const { session, rpcs } = await authorized(scope, params.id, Action.pushWorkspace, "write");
      const reply = await uploaded(req, session, (transfer) => callRpc(ctx.deps.nc, rpcs.push, { ...target(session), path: query.path ?? "", ...transfer }, rpcOpts));
      // The push is a fact: committed on the record (one audit event) before the client is told.
      await recordFact(scope, session.id, "push");
      return { status: 200, body: reply };
    }),

    ctx.serve(HttpApi.pullWorkspace, async ({ caller: { scope }, params, query, res }) => {
      const path = query.path ?? "";
      const { session, rpcs } = await authorized(scope, params.id, Action.pullWorkspace, "read");
      const transferId = ctx.deps.newId();
      const name = transferObjectName(session.workspaceId, session.id, transferId);
      const key = newSealKey();
      try {
        const { size } = await callRpc(ctx.deps.nc, rpcs.pull, { ...target(session), path, transferId, sealKey: key.toString("base64") }, rpcOpts);
        const got = await (await transfers()).get(name);
        if (!got) throw new UnavailableError("the runner's archive is gone; retry");
        await recordFact(scope, session.id, "pull");
        res.writeHead(200, { "content-type": ARCHIVE_CONTENT_TYPE, "content-length": String(size), "cache-control": "no-store" });
        await streamUnsealed(got, key, name, res, session.id);
      } finally {
        await removeQuietly(name);
      }
    }),

    ctx.serve(HttpApi.readFile, async ({ caller: { scope }, params, query, req, res }) => {
      const { session, rpcs } = await authorized(scope, params.id, Action.readFiles, "read");
      const range = parseByteRange(req.headers.range);
      const transferId = ctx.deps.newId();
      const name = transferObjectName(session.workspaceId, session.id, transferId);
      const key = newSealKey();
      // Nothing to remove afterwards when the runner stored no object (inline bytes, the data plane's, or none at all).
      let stored = true;
      try {
        // On the data plane only what one small message carries comes inline: the rest skips the bus.
        const ask = (via: "bus" | "data") => callRpcWithBytes(ctx.deps.nc, rpcs.read, { ...target(session), path: query.path, transferId, sealKey: key.toString("base64"), inlineMaxBytes: via === "data" ? Math.min(DATA_INLINE_MAX_BYTES, inlineLimit()) : inlineLimit(), via, ...(range ? { range } : {}) }, new Uint8Array(0), rpcOpts);
        const runner = `${session.poolId ?? ""}/${session.runnerId ?? ""}`;
        let answer = await ask(dialer.usable(runner) ? "data" : "bus");
        // The runner's data plane not reachable from here: the bytes come through the transfer store instead.
        const socket = answer.result.data && (await dialer.dial(runner, answer.result.data));
        if (answer.result.data && !socket) answer = await ask("bus");
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
          const bytes = await readWhole(name, key, length);
          res.writeHead(range ? 206 : 200, head);
          res.end(bytes);
          return;
        }
        const got = await (await transfers()).get(name);
        if (!got) throw new UnavailableError("the runner's copy of the file is gone; retry");
        res.writeHead(range ? 206 : 200, head);
        await streamUnsealed(got, key, name, res, session.id);
      } finally {
        if (stored) await removeQuietly(name);
      }
    }),

    ctx.serve(HttpApi.writeFile, async ({ caller: { scope }, params, query, req }) => {
      refuseDeclaredTooLarge(req);
      const { session, rpcs } = await authorized(scope, params.id, Action.writeFiles, "write");
      writable(session);
      const write = async (bytes: { inline: Uint8Array } | { transferId: string; sealKey: string }): Promise<FileWriteReply> => {
        const request = { ...target(session), path: query.path, mode: query.mode, ...("inline" in bytes ? { inline: true as const } : bytes) };
        const { result } = await callRpcWithBytes(ctx.deps.nc, rpcs.write, request, "inline" in bytes ? bytes.inline : new Uint8Array(0), rpcOpts);
        if ("data" in result) throw new UnavailableError("the runner offered its data plane for a write on the bus; retry");
        return result;
      };
      const declared = req.headers["content-length"] === undefined ? undefined : Number(req.headers["content-length"]);
      const runner = `${session.poolId ?? ""}/${session.runnerId ?? ""}`;
      // Past one small message, a body of declared length goes on the runner's data plane when it can be dialled;
      // else one that fits one message goes inline, and a larger one, or one of unknown length, through a transfer object.
      const onData = declared !== undefined && declared > DATA_INLINE_MAX_BYTES && dialer.usable(runner) ? await writeOnDataPlane(session, runner, query, req, declared) : undefined;
      const reply = onData ?? (declared !== undefined && declared <= inlineLimit() ? await write({ inline: await wholeBody(req, declared) }) : await uploaded(req, session, write));
      // Each write is a fact (one audit event, fixed fields only: no path, no content) before the client is told.
      await recordFact(scope, session.id, "file.write");
      return { status: 200, body: reply };
    }),

    ctx.serve(HttpApi.deleteFile, async ({ caller: { scope }, params, query }) => {
      const { session, rpcs } = await authorized(scope, params.id, Action.writeFiles, "write");
      writable(session);
      const reply = await callRpc(ctx.deps.nc, rpcs.delete, { ...target(session), path: query.path, recursive: query.recursive }, rpcOpts);
      await recordFact(scope, session.id, "file.delete");
      return { status: 200, body: reply };
    }),

    ctx.serve(HttpApi.listFiles, async ({ caller: { scope }, params, query }) => {
      const { session, rpcs } = await authorized(scope, params.id, Action.readFiles, "read");
      return { status: 200, body: fileListOf(await callRpc(ctx.deps.nc, rpcs.list, { ...target(session), path: query.path ?? "", depth: query.depth }, rpcOpts)) };
    }),

    ctx.serve(HttpApi.readDiff, async ({ caller: { scope }, params }) => {
      const { session, rpcs } = await authorized(scope, params.id, Action.readDiff, "read");
      return { status: 200, body: await callRpc(ctx.deps.nc, rpcs.diff, target(session), rpcOpts) };
    }),

    // Branch, head and dirtiness of each repository: read like the diff, by any member.
    ctx.serve(HttpApi.listRepos, async ({ caller: { scope }, params }) => {
      const { session, rpcs } = await authorized(scope, params.id, Action.readDiff, "read");
      return { status: 200, body: await callRpc(ctx.deps.nc, rpcs.repos, target(session), rpcOpts) };
    }),
  ];
}
