import { JetStreamApiError, JetStreamApiCodes } from "@nats-io/jetstream";

/** True for a compare-and-set that lost: KV update or expected-last-sequence publish. */
export function isWrongLastSequence(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamWrongLastSequence;
}

export function isNoMessage(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.NoMessageFound;
}
