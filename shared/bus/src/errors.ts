import { JetStreamApiError, JetStreamApiCodes } from "@nats-io/jetstream";
import { PaddockError, UnavailableError } from "@paddock/contracts";

/** True for a compare-and-set that lost: KV update or expected-last-sequence publish. */
export function isWrongLastSequence(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamWrongLastSequence;
}

export function isNoMessage(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.NoMessageFound;
}

/** Errors of the NATS client that mean "the broker is not answering right now". */
const BUS_UNAVAILABLE = new Set([
  "TimeoutError",
  "NoRespondersError",
  "ClosedConnectionError",
  "ConnectionError",
  "DrainingConnectionError",
  "RequestError",
]);

/**
 * Maps any error to the public vocabulary: a PaddockError as it is; a broker
 * that is unreachable or slow as `unavailable` (retryable, 503); anything else
 * `internal`, with no detail (raw errors never cross the boundary).
 */
export function toPaddockError(err: unknown): PaddockError {
  if (err instanceof PaddockError) return err;
  if (err instanceof Error && BUS_UNAVAILABLE.has(err.name)) return new UnavailableError("the message bus is not answering; retry");
  return new PaddockError("internal", "internal error");
}
