/**
 * What the workspace routes (workspace.ts: archives, diff, repositories) and
 * the files routes (files.ts) share: the session authorized and woken for a
 * call, the runner it is held on, the transfer store's sealed objects, the
 * request body bounded, and the workspace fact each change commits.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { Objm, type ObjectResult, type ObjectStore } from "@nats-io/obj";
import { newSealKey, SealError, sealed, unsealed } from "@paddock/archive";
import { callRpc } from "@paddock/bus";
import { Api, inlineBytesFor, ObjectStores, TooLargeError, transferObjectName, transferRef, UnavailableError, workspaceRpcs, type Scope, type Session, type TransferDirection } from "@paddock/contracts";
import type { Action } from "../auth/auth.ts";
import { heldPlacement } from "./placement-hints.ts";
import { startedForUse, wakeForUse } from "./wake.ts";
import { readBodyBytes } from "../http/http.ts";
import { sessionResource, type GatewayContext } from "../context.ts";

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

/** Which placement of which session a runner request is for. */
export const targetOf = (session: Pick<Session, "id" | "workspaceId" | "placementGeneration">) => ({ sessionId: session.id, workspaceId: session.workspaceId, placementGeneration: session.placementGeneration });

export type WorkspaceCalls = ReturnType<typeof workspaceCalls>;

export function workspaceCalls(ctx: GatewayContext) {
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
   * The session, authorized for action, running or woken when the call needs
   * it (one whose sandbox is being made is waited for; wake on use: writes wake a warm or cold
   * session, reads a cold one only; a warm one is read as it is, without waking it).
   */
  const authorized = async (scope: Scope, sessionId: string, action: Action, wake: "write" | "read", req?: IncomingMessage) => {
    const read = await ctx.getSession(scope, sessionId, req);
    await ctx.authorizer.authorize(scope, action, sessionResource(read));
    // Its sandbox still being made (its output may already show): the call waits for it to run.
    const found = await startedForUse(ctx, scope, read, req?.socket);
    const session = wake === "write" || found.state === "suspended_cold" ? await wakeForUse(ctx, scope, found) : found;
    const { poolId, runnerId } = heldPlacement(session);
    return { session, rpcs: workspaceRpcs(poolId, runnerId) };
  };

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

  /** The request body whole (its length declared, at most max: the HTTP parser ends it there), copied once. */
  const wholeBody = (req: IncomingMessage, max: number): Promise<Buffer> => readBodyBytes(req, max, "upload");

  /** A workspace fact committed on the record (one audit event). */
  const recordFact = (scope: Scope, sessionId: string, direction: TransferDirection) =>
    callRpc(ctx.deps.nc, Api.recordTransfer, { scope, sessionId, direction }, { timeoutMs: config.rpcTimeoutMs });

  return { transfers, rpcOpts, authorized, streamUnsealed, removeQuietly, refuseDeclaredTooLarge, uploaded, readWhole, inlineLimit, wholeBody, recordFact };
}
