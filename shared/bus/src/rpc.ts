import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import type { z } from "zod";
import {
  errorFromBody,
  PaddockError,
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
  return nc.subscribe(rpc.subject, {
    queue: opts.queue ?? QueueGroups.scheduler,
    callback: (err, msg) => {
      if (err) {
        opts.log.error({ err, subject: rpc.subject }, "subscription error");
        return;
      }
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
