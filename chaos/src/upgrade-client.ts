/**
 * The upgrade scenario's clients: "a client that retries" is the SDK's own
 * Transport (its retry policy: a GET, or a create carrying an idempotency
 * key, is tried again on `unavailable`, `rate_limited` or a connection error,
 * after Retry-After or a jittered backoff from 200 ms, 4 retries), in front of
 * a round-robin over every gateway, as a load balancer or DNS would spread
 * the calls. Every call is counted; one that still fails after the SDK's
 * retries is a failed API call. The longest unavailability is the time from a
 * call's first failed try to its answer.
 */
import type { NatsConnection } from "@nats-io/transport-node";
import { Streams, type HttpRoute, type JsonAnswer } from "@paddock/contracts";
import { Transport, type CallInput, type SendOptions } from "@paddock/sdk";
import { readStream } from "./client.ts";

/** A call that did not answer in this long is failed (a client's own deadline); the SDK's retries fit well within it. */
const CALL_DEADLINE_MS = 30_000;

export interface FailedCall {
  label: string;
  at: number;
  error: string;
}

export class RetryingClients {
  calls = 0;
  /** Calls that needed more than one try (and then answered). */
  retried = 0;
  readonly failures: FailedCall[] = [];
  longestUnavailableMs = 0;
  longestUnavailableLabel = "";
  /** Tries that failed (connection error, 503, 429), by the gateway they went to. */
  readonly failedTries = new Map<string, number>();
  /** The same tries by what failed: an HTTP status, or the connection error's code. */
  readonly failedTryKinds = new Map<string, number>();
  private turn = 0;

  constructor(
    private readonly urls: readonly string[],
    private readonly token: string,
  ) {}

  /** A JSON call; undefined when it failed after the SDK's retries (counted). */
  call<R extends HttpRoute>(label: string, route: R, input: CallInput<R> = {}, opts: SendOptions = {}): Promise<JsonAnswer<R> | undefined> {
    return this.run(label, (t, signal) => t.call(route, { ...input, signal }, opts));
  }

  /** A call whose answer is bytes (the terminal log), as text. */
  text<R extends HttpRoute>(label: string, route: R, input: CallInput<R> = {}): Promise<string | undefined> {
    return this.run(label, async (t, signal) => (await t.send(route, { ...input, signal })).text());
  }

  private async run<T>(label: string, body: (t: Transport, signal: AbortSignal) => Promise<T>): Promise<T | undefined> {
    let tries = 0;
    let firstFailureAt: number | undefined;
    // Round-robin per request: a call starts at the next gateway, and each retry goes to the one after
    // the gateway its last try failed on, as a load balancer spreads new connections.
    const first = this.turn++;
    const spread: typeof fetch = async (input, init) => {
      const base = this.urls[(first + tries++) % this.urls.length] ?? this.urls[0] ?? "";
      const target = new URL(input instanceof Request ? input.url : String(input));
      const to = new URL(base);
      target.protocol = to.protocol;
      target.host = to.host;
      const startedAt = Date.now();
      try {
        const res = await fetch(target, init);
        if (res.status === 503 || res.status === 429) {
          firstFailureAt ??= startedAt;
          this.failedTry(to.host, `HTTP ${res.status}`);
        }
        return res;
      } catch (err) {
        firstFailureAt ??= startedAt;
        this.failedTry(to.host, connectionErrorCode(err));
        throw err;
      }
    };
    const transport = new Transport({ baseUrl: this.urls[0] ?? "", token: this.token, fetch: spread });
    this.calls += 1;
    try {
      const out = await body(transport, AbortSignal.timeout(CALL_DEADLINE_MS));
      if (tries > 1) this.retried += 1;
      return out;
    } catch (err) {
      const e = err as { code?: unknown; status?: unknown; message?: unknown };
      this.failures.push({ label, at: Date.now(), error: `${String(e.code ?? "error")} (HTTP ${String(e.status ?? "-")}) after ${tries} tries: ${String(e.message ?? err)}` });
      return undefined;
    } finally {
      if (firstFailureAt !== undefined && Date.now() - firstFailureAt > this.longestUnavailableMs) {
        this.longestUnavailableMs = Date.now() - firstFailureAt;
        this.longestUnavailableLabel = label;
      }
    }
  }

  private failedTry(host: string, kind: string): void {
    this.failedTries.set(host, (this.failedTries.get(host) ?? 0) + 1);
    this.failedTryKinds.set(kind, (this.failedTryKinds.get(kind) ?? 0) + 1);
  }
}

/** fetch's connection errors carry the socket's code (ECONNREFUSED, ECONNRESET, UND_ERR_SOCKET) on their cause. */
function connectionErrorCode(err: unknown): string {
  const cause = (err as { cause?: { code?: unknown } }).cause;
  return typeof cause?.code === "string" ? cause.code : err instanceof Error ? err.name : "error";
}

/**
 * A session's whole terminal log across its placements, from the TERM stream
 * in stream order: `GET /log` answers the current placement's only (a cold
 * resume starts a new terminal), so continuity across a move is read here.
 */
export async function termText(nc: NatsConnection, sessionId: string): Promise<string> {
  const chunks = await readStream(nc, Streams.term, `paddock.term.*.*.${sessionId}.*`);
  return chunks.map((m) => Buffer.from(m.data).toString("latin1")).join("");
}

/** Numbered lines (`seq<N>`) of a terminal log: how many, the gaps (a number skipped: bytes lost) and the repeats. */
export function lineContinuity(text: string): { lines: number; gaps: string[]; repeats: number; last: number } {
  const numbers = [...text.matchAll(/seq(\d+)\r?\n/g)].map((m) => Number(m[1]));
  const gaps: string[] = [];
  let repeats = 0;
  for (let i = 1; i < numbers.length; i++) {
    const prev = numbers[i - 1] ?? 0;
    const cur = numbers[i] ?? 0;
    if (cur > prev + 1) gaps.push(`seq${prev} followed by seq${cur}`);
    // A cold move restarts the printer from the counter in its checkpointed workspace: the line
    // printed after the last write of the counter comes again. Never a gap; counted apart.
    else if (cur <= prev) repeats += 1;
  }
  if (numbers.length > 0 && numbers[0] !== 1) gaps.push(`the log starts at seq${numbers[0] ?? "?"}`);
  return { lines: numbers.length, gaps, repeats, last: numbers.at(-1) ?? 0 };
}
