import { JetStreamApiError, JetStreamApiCodes } from "@nats-io/jetstream";
import { JetStreamStatusError, jserrors } from "@nats-io/jetstream/internal";
import { ClosedConnectionError, ConnectionError, DrainingConnectionError, NoRespondersError, RequestError, TimeoutError } from "@nats-io/transport-node";
import { PaddockError, UnavailableError } from "@paddock/contracts";

/** True for a compare-and-set that lost: KV update or expected-last-sequence publish. */
export function isWrongLastSequence(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamWrongLastSequence;
}

/**
 * The sequence the stream actually holds, from a "wrong last sequence: N"
 * refusal (the server's text for error 10071); undefined for anything else.
 * Lets a writer that may not read other subjects learn where the log stands.
 */
export function refusedAtSequence(err: unknown): number | undefined {
  if (!isWrongLastSequence(err)) return undefined;
  const m = /wrong last sequence:\s*(\d{1,15})/i.exec((err as Error).message);
  return m?.[1] === undefined ? undefined : Number(m[1]);
}

/** True when nobody was subscribed to a request's subject (the client's RequestError carries it as its cause). */
export function isNoResponders(err: unknown): boolean {
  return err instanceof RequestError ? err.isNoResponders() : err instanceof NoRespondersError;
}

export function isNoMessage(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.NoMessageFound;
}

/** True when a direct get (batch) found nothing at or after where it asked: the server answers status 404, not an empty batch. */
export function isDirectGetEmpty(err: unknown): boolean {
  return err instanceof JetStreamStatusError && err.code === 404;
}

/** True when the stream (or the KV bucket / object store behind it) does not exist: API error 10059. */
export function isStreamNotFound(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound;
}

/** True when the consumer does not exist: API error 10014. */
export function isConsumerNotFound(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.ConsumerNotFound;
}

/** API error 10058: a stream of that name exists with another configuration (nats.js names no constant for it). */
const STREAM_NAME_IN_USE = 10058;

/** True when adding a stream failed because one of that name exists with another configuration. */
export function isStreamNameInUse(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === STREAM_NAME_IN_USE;
}

/**
 * Errors of the NATS client that mean "the broker is not answering right now",
 * matched by class (nats.js exports them for `instanceof`), never by name.
 * `JetStreamNotEnabled` is "no responders" to a JetStream request while a
 * stream elects a new leader (a cluster node died): transient, not an internal
 * error (found by `pnpm chaos`); nats.js exports it only from `./internal`.
 */
const BUS_UNAVAILABLE = [
  TimeoutError,
  NoRespondersError,
  ClosedConnectionError,
  ConnectionError,
  DrainingConnectionError,
  RequestError,
  jserrors.JetStreamNotEnabled,
] as const;

/** True for an error of the NATS client saying the broker is not answering right now. */
export function isBusUnavailable(err: unknown): boolean {
  return BUS_UNAVAILABLE.some((cls) => err instanceof cls);
}

/**
 * Maps any error to the public vocabulary: a PaddockError as it is; a broker
 * that is unreachable or slow as `unavailable` (retryable, 503); anything else
 * `internal`, with no detail (raw errors never cross the boundary; the
 * original stays as `cause`, for logs).
 */
export function toPaddockError(err: unknown): PaddockError {
  if (err instanceof PaddockError) return err;
  if (isBusUnavailable(err)) return new UnavailableError("the message bus is not answering; retry", { cause: err });
  // The server's own "temporarily unavailable" (status 503: no stream or meta leader during an election).
  if (err instanceof JetStreamApiError && err.status === 503) return new UnavailableError("the message bus is electing a leader; retry", { cause: err });
  return new PaddockError("internal", "internal error", { cause: err });
}
