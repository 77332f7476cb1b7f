import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import type { z } from "zod";
import {
  errorFromBody,
  packWithBytes,
  PaddockError,
  unpackWithBytes,
  QueueGroups,
  replyEnvelope,
  UnavailableError,
  type Rpc,
} from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { decodeJson } from "./codec.ts";
import { toPaddockError } from "./errors.ts";
import type { BusMetrics } from "./metrics.ts";
import { encoderOf } from "./outgoing.ts";

/** What the bus says about a request besides its body. */
export interface RpcMeta {
  /**
   * The subject the answer goes to. With per-principal NATS credentials it
   * starts with the asker's own inbox prefix, which only the asker may read.
   */
  reply: string | undefined;
}

export type RpcHandler<R extends Rpc<z.ZodType, z.ZodType>> = (
  request: z.infer<R["request"]>,
  meta: RpcMeta,
) => Promise<z.input<R["result"]>>;

export interface ServeRpcOptions {
  queue?: string;
  metrics: BusMetrics;
  log: Logger;
}

const encoder = new TextEncoder();

function replyError(msg: Msg, err: PaddockError): void {
  msg.respond(encoder.encode(JSON.stringify({ ok: false, error: err.toBody() })));
}

/**
 * Serves one operation in a queue group. The request is validated once here;
 * a PaddockError from the handler becomes a typed error reply, anything else
 * an `internal` one with no detail (raw errors never cross the boundary).
 */
export function serveRpc<R extends Rpc<z.ZodType, z.ZodType>>(
  nc: NatsConnection,
  rpc: R,
  handler: RpcHandler<R>,
  opts: ServeRpcOptions,
): Subscription {
  const envelope = replyEnvelope(rpc.result);
  const encode = encoderOf(nc);
  return subscribeRpc(nc, rpc.subject, opts, (msg) => {
    const decoded = decodeJson(rpc.request, msg.data);
    if (!decoded.ok) {
      opts.metrics.invalidMessages.inc({ subject: rpc.subject });
      replyError(msg, new PaddockError("invalid", decoded.reason));
      return;
    }
    handler(decoded.value as z.infer<R["request"]>, { reply: msg.reply }).then(
      (result) => msg.respond(encode(envelope, { ok: true, result })),
      (handlerErr: unknown) => {
        const mapped = toPaddockError(handlerErr);
        if (mapped.code === "internal") opts.log.error({ err: handlerErr, subject: rpc.subject }, "rpc handler failed");
        replyError(msg, mapped);
      },
    );
  });
}

/** One operation's subscription in its queue group; a subscription error is logged, each message handed to onMsg. */
function subscribeRpc(nc: NatsConnection, subject: string, opts: ServeRpcOptions, onMsg: (msg: Msg) => void): Subscription {
  return nc.subscribe(subject, {
    queue: opts.queue ?? QueueGroups.scheduler,
    callback: (err, msg) => {
      if (err) opts.log.error({ err, subject }, "subscription error");
      else onMsg(msg);
    },
  });
}

/** Reply envelopes by result schema: building a zod schema costs far more than using one. */
const envelopes = new WeakMap<z.ZodType, z.ZodType>();

function envelopeOf(result: z.ZodType): z.ZodType {
  let envelope = envelopes.get(result);
  if (!envelope) {
    envelope = replyEnvelope(result);
    envelopes.set(result, envelope);
  }
  return envelope;
}

/** Calls an operation; a typed error reply is thrown as its PaddockError class. */
export async function callRpc<R extends Rpc<z.ZodType, z.ZodType>>(
  nc: NatsConnection,
  rpc: R,
  request: z.input<R["request"]>,
  opts: { timeoutMs?: number } = {},
): Promise<z.infer<R["result"]>> {
  // Outside the try: a request that cannot be encoded is the caller's error (invalid), never a retryable `unavailable`.
  const data = encoderOf(nc)(rpc.request, request);
  let reply: Msg;
  try {
    reply = await nc.request(rpc.subject, data, { timeout: opts.timeoutMs ?? 5_000 });
  } catch (err) {
    throw new UnavailableError(`no answer from ${rpc.subject}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const decoded = decodeJson(envelopeOf(rpc.result), reply.data);
  if (!decoded.ok) throw new UnavailableError(`malformed reply from ${rpc.subject}`);
  const env = decoded.value as { ok: true; result: z.infer<R["result"]> } | { ok: false; error: never };
  if (env.ok) return env.result;
  throw errorFromBody(env.error);
}

/** What a withBytes handler answers: its result and the bytes that follow it (none when absent). */
export interface WithBytes<T> {
  result: T;
  bytes?: Uint8Array | undefined;
}

export type RpcBytesHandler<R extends Rpc<z.ZodType, z.ZodType>> = (request: z.infer<R["request"]>, bytes: Uint8Array, meta: RpcMeta) => Promise<WithBytes<z.input<R["result"]>>>;

function replyPackedError(msg: Msg, err: PaddockError): void {
  msg.respond(packWithBytes(encoder.encode(JSON.stringify({ ok: false, error: err.toBody() })), new Uint8Array(0)));
}

/**
 * serveRpc for a withBytes rpc: the request's JSON is checked as serveRpc
 * checks it and the bytes after it are handed over as they are; the reply
 * is packed the same way (an error's with no bytes).
 */
export function serveRpcWithBytes<R extends Rpc<z.ZodType, z.ZodType>>(nc: NatsConnection, rpc: R, handler: RpcBytesHandler<R>, opts: ServeRpcOptions): Subscription {
  const envelope = replyEnvelope(rpc.result);
  const encode = encoderOf(nc);
  return subscribeRpc(nc, rpc.subject, opts, (msg) => {
    const packed = unpackWithBytes(msg.data);
    const decoded = packed ? decodeJson(rpc.request, packed.json) : { ok: false as const, reason: "not a message with bytes (a u32 length, JSON, bytes)" };
    if (!packed || !decoded.ok) {
      opts.metrics.invalidMessages.inc({ subject: rpc.subject });
      replyPackedError(msg, new PaddockError("invalid", decoded.ok ? "malformed" : decoded.reason));
      return;
    }
    handler(decoded.value as z.infer<R["request"]>, packed.bytes, { reply: msg.reply }).then(
      ({ result, bytes }) => msg.respond(packWithBytes(encode(envelope, { ok: true, result }), bytes ?? new Uint8Array(0))),
      (handlerErr: unknown) => {
        const mapped = toPaddockError(handlerErr);
        if (mapped.code === "internal") opts.log.error({ err: handlerErr, subject: rpc.subject }, "rpc handler failed");
        replyPackedError(msg, mapped);
      },
    );
  });
}

/** callRpc for a withBytes rpc: bytes go after the request's JSON, and come back after the result's. */
export async function callRpcWithBytes<R extends Rpc<z.ZodType, z.ZodType>>(
  nc: NatsConnection,
  rpc: R,
  request: z.input<R["request"]>,
  bytes: Uint8Array,
  opts: { timeoutMs?: number } = {},
): Promise<{ result: z.infer<R["result"]>; bytes: Uint8Array }> {
  const data = packWithBytes(encoderOf(nc)(rpc.request, request), bytes);
  let reply: Msg;
  try {
    reply = await nc.request(rpc.subject, data, { timeout: opts.timeoutMs ?? 5_000 });
  } catch (err) {
    throw new UnavailableError(`no answer from ${rpc.subject}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const packed = unpackWithBytes(reply.data);
  const decoded = packed ? decodeJson(envelopeOf(rpc.result), packed.json) : undefined;
  if (!packed || !decoded?.ok) throw new UnavailableError(`malformed reply from ${rpc.subject}`);
  const env = decoded.value as { ok: true; result: z.infer<R["result"]> } | { ok: false; error: never };
  if (env.ok) return { result: env.result, bytes: packed.bytes };
  throw errorFromBody(env.error);
}
