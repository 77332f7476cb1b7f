/**
 * The files routes' operations on the runner (issue 24 item 3): read, list,
 * write and delete one path of a held session's workspace, each inside the
 * session's workspace task (after its earlier commands, while its sandbox is
 * live) and through files.ts's descriptor-held paths. Bytes move inline
 * (small), through the runner's data plane (a read that asks for it), or
 * through object store `transfers`, sealed, as push and pull move archives.
 */
import type { Socket } from "node:net";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import type { ObjectStore } from "@nats-io/obj";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { FileTooLargeError, relativeSegments, SealError, sealed, sealKeyFrom, unsealed, type FileOwner, type ReplaceFile } from "@paddock/archive";
import { serveRpc, serveRpcWithBytes, toPaddockError, type BusMetrics, type WithBytes } from "@paddock/bus";
import { InvalidError, MAX_INLINE_FILE_BYTES, type FileWriteOffer, type FileWriteOutcome, NotFoundError, TooLargeError, transferObjectName, transferRef, fileListColumns, type FileDeleteReply, type FileListColumns, type FileReadReply, type FileReadRequest, type DataPlaneOffer, type FileWriteReply, type FileWriteRequest, type workspaceRpcs } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { deleteInside, listInside, openFileInside, writeFileInside } from "./files.ts";

/** Which placement of which session a request is for (every workspace request names one). */
type Target = Pick<FileReadRequest, "sessionId" | "workspaceId" | "placementGeneration">;

export interface FileOpsContext {
  nc: NatsConnection;
  rpcs: ReturnType<typeof workspaceRpcs>;
  /** The held session a request names (a conflict for another placement). */
  held: (t: Target) => { workspaceTask<T>(fn: (workspace: string, user: FileOwner | undefined) => Promise<T>): Promise<T> };
  transfers: () => Promise<ObjectStore>;
  /** The largest file a write may make. */
  maxBytes: number;
  /** How a written file takes its path's place (replace-file.ts); a rename without it. */
  replaceFile?: ReplaceFile;
  serve: { queue: string; metrics: BusMetrics; log: Logger };
  log: Logger;
  /** The runner's errors as the public vocabulary. */
  translate: <T>(fn: () => Promise<T>) => Promise<T>;
  /** Hands the gateway's data-plane socket to taker once dialled (ports/data-plane.ts); absent or undefined: the bytes go another way. */
  offer?: DataPlaneOfferer;
}

/**
 * A connection's one use that wants the gateway's socket itself (a file's
 * bytes one way, a short answer the other): take() gets the socket, paused,
 * and the bytes that came with its ticket; drop() says it will never come
 * (not dialled in time, or the data plane stopped). The taker ends or
 * destroys the socket.
 */
export interface SocketTaker {
  take(socket: Socket, early: Buffer): void;
  drop(): void;
}

/** The data plane's offer of one connection to a taker (ports/data-plane.ts' `offerSocket`). */
export type DataPlaneOfferer = (taker: SocketTaker, sessionId: string) => DataPlaneOffer | undefined;

export function serveFileOps(c: FileOpsContext): Subscription[] {
  const { nc, rpcs, translate } = c;
  /** A write's bytes: inline, or the transfer object unsealed (done() says whether the object was whole). */
  const writeSource = async (req: FileWriteRequest, inline: Uint8Array): Promise<{ source: AsyncIterable<Uint8Array>; done: () => Promise<void> }> => {
    if (req.inline === true) {
      if (inline.byteLength > MAX_INLINE_FILE_BYTES) throw new TooLargeError(`inline bytes past ${MAX_INLINE_FILE_BYTES}: send them through a transfer object`);
      return { source: Readable.from([inline]), done: () => Promise.resolve() };
    }
    if (inline.byteLength > 0) throw new InvalidError("bytes after a write that names a transfer object");
    const name = transferObjectName(req.workspaceId, req.sessionId, req.transferId as string);
    const got = await (await c.transfers()).get(name);
    if (!got) throw new NotFoundError("transfer");
    const source = unsealed(Readable.fromWeb(got.data as NodeWebReadableStream<Uint8Array>), sealKeyFrom(req.sealKey as string), transferRef(name));
    return {
      source,
      done: async () => {
        if (await got.error) throw new InvalidError("file is corrupt in the transfer store");
      },
    };
  };
  const write = async (req: FileWriteRequest, workspace: string, segments: string[], user: FileOwner | undefined, source: AsyncIterable<Uint8Array>): Promise<FileWriteReply> => {
    let size: number;
    try {
      size = await writeFileInside(workspace, segments, source, { mode: req.mode, owner: user, maxBytes: c.maxBytes, replace: c.replaceFile });
    } catch (err) {
      if (err instanceof SealError) throw new InvalidError("file does not open with its transfer key", { cause: err });
      if (err instanceof FileTooLargeError) throw new TooLargeError(err.message, { cause: err });
      throw err;
    }
    c.log.info({ sessionId: req.sessionId, bytes: size }, "file written");
    return { path: segments.join("/"), size };
  };
  /**
   * A write whose bytes come on the data plane: answered at once with the
   * offer, then, once its first byte came, done inside the session's
   * workspace task straight from the gateway's socket (exactly size bytes,
   * else nothing of the file is left); its outcome goes back on the socket
   * (FileWriteOutcome), then its end. An offer never taken, or a connection
   * closed before a byte, holds nothing up and answers nothing.
   */
  const offerWrite = (req: FileWriteRequest, size: number, attached: Uint8Array): FileWriteOffer => {
    if (attached.byteLength > 0) throw new InvalidError("bytes after a write whose bytes come on the data plane");
    if (size > c.maxBytes) throw new TooLargeError(`file is larger than ${c.maxBytes} bytes`);
    const runtime = c.held(req);
    const segments = relativeSegments(req.path);
    const take = async (socket: Socket, early: Buffer) => {
      const incoming = socket.iterator({ destroyOnReturn: false }) as AsyncIterableIterator<Buffer>;
      // Nothing of the workspace is touched before the first byte: a gateway that dialled early and then
      // closed without one (the call was not authorized, or the session moved) leaves no trace.
      const first = early.byteLength > 0 || size === 0 ? early : await incoming.next().then((next) => (next.done ? undefined : next.value), () => undefined);
      if (!first) return void socket.destroy();
      const bytes = exactly(withFirst(first, incoming), size);
      const outcome = await translate(() => runtime.workspaceTask((workspace, user) => write(req, workspace, segments, user, bytes))).then(
        (result): FileWriteOutcome => ({ ok: true, result }),
        (err: unknown): FileWriteOutcome => ({ ok: false, error: toPaddockError(err).toBody() }),
      );
      socket.end(JSON.stringify(outcome));
      // A write refused before all its bytes were read (a bad path: the bytes were never asked for) drops the
      // rest, so the connection can end; the reader lets go of the socket first (while it listens, resume does nothing).
      await incoming.return?.();
      socket.resume();
    };
    const data = c.offer?.({ take: (socket, early) => void take(socket, early), drop: () => undefined }, req.sessionId);
    // No data plane here: the gateway sends the bytes another way.
    return { data: data ?? null };
  };
  const onWorkspace = <T>(req: Target & { path: string }, fn: (workspace: string, segments: string[], user: FileOwner | undefined) => Promise<T>): Promise<T> =>
    translate(() => {
      const runtime = c.held(req);
      const segments = relativeSegments(req.path);
      return runtime.workspaceTask((workspace, user) => fn(workspace, segments, user));
    });
  return [
    serveRpcWithBytes(nc, rpcs.read, (req, attached) =>
      onWorkspace(req, async (workspace, segments, user): Promise<WithBytes<FileReadReply>> => {
        if (attached.byteLength > 0) throw new InvalidError("bytes after a read request");
        const { stream, size, part } = await openFileInside(workspace, segments, user, req.range);
        if (part === undefined) {
          stream.destroy();
          return { result: { size, start: 0, end: -1, unsatisfiable: true } };
        }
        // Small enough for the reply itself: no object, no second read.
        if (part.end - part.start + 1 <= (req.inlineMaxBytes ?? 0)) {
          const bytes = await bytesOf(stream);
          return { result: { size, start: part.start, end: part.end, unsatisfiable: false, inline: true }, bytes };
        }
        const data = req.via === "data" ? c.offer?.(sendingTo(stream), req.sessionId) : undefined;
        if (data) return { result: { size, start: part.start, end: part.end, unsatisfiable: false, data } };
        const name = transferObjectName(req.workspaceId, req.sessionId, req.transferId);
        const body = sealed(stream, sealKeyFrom(req.sealKey), transferRef(name));
        await (await c.transfers()).put({ name }, Readable.toWeb(body) as unknown as ReadableStream<Uint8Array>);
        return { result: { size, start: part.start, end: part.end, unsatisfiable: false } };
      }),
    c.serve),
    serveRpc(nc, rpcs.list, (req) => onWorkspace(req, async (workspace, segments, user): Promise<FileListColumns> => fileListColumns(await listInside(workspace, segments, req.depth, user))), c.serve),
    serveRpcWithBytes(nc, rpcs.write, (req, attached): Promise<WithBytes<FileWriteReply | FileWriteOffer>> =>
      req.data !== undefined
        ? translate(async () => ({ result: offerWrite(req, req.data?.size ?? 0, attached) }))
        : onWorkspace(req, async (workspace, segments, user): Promise<WithBytes<FileWriteReply>> => {
            const { source, done } = await writeSource(req, attached);
            const result = await write(req, workspace, segments, user, source);
            await done();
            return { result };
          }),
    c.serve),
    serveRpc(nc, rpcs.delete, (req) =>
      onWorkspace(req, async (workspace, segments): Promise<FileDeleteReply> => {
        await deleteInside(workspace, segments, req.recursive);
        c.log.info({ sessionId: req.sessionId, recursive: req.recursive }, "file removed");
        return { path: segments.join("/") };
      }),
    c.serve),
  ];
}

/** first (when it has bytes), then rest's. */
async function* withFirst(first: Buffer, rest: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  if (first.byteLength > 0) yield first;
  yield* rest;
}

/** The bytes of source, which must be exactly size of them (a connection cut early, or one sending more, fails the write). */
async function* exactly(source: AsyncIterable<Uint8Array>, size: number): AsyncGenerator<Uint8Array> {
  let got = 0;
  for await (const chunk of source) {
    got += chunk.byteLength;
    if (got > size) throw new InvalidError(`more bytes than the ${size} declared`);
    yield chunk;
  }
  if (got !== size) throw new InvalidError(`the bytes ended after ${got} of ${size}`);
}

async function bytesOf(stream: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const part of stream) parts.push(Buffer.from(part));
  return Buffer.concat(parts);
}

/** Sends a file's bytes on the gateway's socket, then ends it; the socket breaking, or never coming, closes the file. */
function sendingTo(source: Readable): SocketTaker {
  return {
    // What the gateway writes after its ticket is not read: the socket stays paused.
    take: (socket) => void pipeline(source, socket).catch(() => socket.destroy()),
    drop: () => source.destroy(),
  };
}
