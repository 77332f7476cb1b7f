/**
 * The SDK's one way to the gateway: every call goes through a route of the
 * HTTP contract (HttpApi: the same schemas the gateway parses with), and
 * every JSON answer is parsed by that route's schema for its status. Only
 * web platform APIs (fetch, URL, AbortSignal, TextDecoder): it runs in
 * browsers, edge runtimes, Deno, Bun and Node alike.
 *
 * Retries: a call that is safe to repeat (a GET, a create carrying an
 * idempotency key) is tried again when the gateway could not be reached or
 * answered a retryable error, after the delay it asked for (Retry-After) or a
 * jittered backoff; anything else fails at once with its typed error.
 */
import type { z } from "zod";
import { ErrorBody, ErrorCode, fillPath, httpStatusOf, type BodyInput, type HttpRoute, type JsonAnswer } from "@paddock/contracts";
import { apiError, type PaddockApiError } from "./errors.ts";

export interface PaddockOptions {
  /** The gateway, e.g. `http://127.0.0.1:8080` (no trailing `/v1`). */
  readonly baseUrl: string;
  /** A bearer token (`pdk_…`, or a session's own token inside a session). */
  readonly token: string;
  /** The fetch to use (default: the platform's). */
  readonly fetch?: typeof fetch;
  /** Tries after the first, of calls safe to repeat (default 4). */
  readonly maxRetries?: number;
  /** First retry delay, doubled per try up to 5 s (default 200 ms), jittered. */
  readonly retryDelayMs?: number;
  /** How the SDK waits between tries (injected by tests; default a timer). */
  readonly sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  readonly random?: () => number;
}

export type Query = Readonly<Record<string, string | number | boolean | undefined>>;

/** What a call through a route sends: its path parameters, query and JSON body, typed by the route. */
export interface CallInput<R extends HttpRoute> {
  readonly params?: { readonly [K in keyof z.input<R["params"]>]: string };
  readonly query?: { readonly [K in keyof z.input<R["query"]>]?: string | number | boolean | undefined };
  readonly body?: BodyInput<R>;
  readonly signal?: AbortSignal | undefined;
}

export interface SendOptions {
  /** The media type asked for (JSON unless said): NDJSON for a route's streamed form. */
  readonly accept?: string;
  /** Try again on a retryable failure (default: only GETs). */
  readonly retry?: boolean;
  /** A raw body (bytes routes), sent as the route's content type. */
  readonly raw?: NonNullable<RequestInit["body"]>;
}

const MAX_DELAY_MS = 5_000;

function defaultSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** Retry-After in seconds (or an HTTP date) as ms; undefined when absent or unreadable. */
function retryAfterOf(res: Response): number | undefined {
  const raw = res.headers.get("retry-after");
  if (raw === null) return undefined;
  const seconds = Number(raw);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const at = Date.parse(raw);
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : undefined;
}

/** The typed error of a failed answer (its body's code and message when it has one). */
export async function errorOf(res: Response): Promise<PaddockApiError> {
  const text = await res.text().catch(() => "");
  let body: ReturnType<typeof ErrorBody.safeParse> | undefined;
  try {
    body = ErrorBody.safeParse((JSON.parse(text) as { error?: unknown } | null)?.error);
  } catch {
    body = undefined;
  }
  const retryAfterMs = retryAfterOf(res);
  if (body?.success) return apiError(body.data.code, body.data.message, res.status, { retryAfterMs });
  return apiError(codeOfStatus(res.status), `the gateway answered HTTP ${res.status}`, res.status, { retryAfterMs });
}

/** The contract's code of an HTTP status without an error body (a proxy's answer): httpStatusOf inverted; anything else ≥ 500 is internal. */
function codeOfStatus(status: number): ErrorCode {
  const code = (Object.values(ErrorCode) as ErrorCode[]).find((c) => c !== ErrorCode.internal && httpStatusOf[c] === status);
  return code ?? (status >= 500 ? ErrorCode.internal : ErrorCode.invalid);
}

export class Transport {
  private readonly fetch: typeof fetch;
  private readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  private readonly random: () => number;
  readonly baseUrl: string;

  constructor(private readonly opts: PaddockOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, "");
    this.fetch = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.sleep = opts.sleep ?? defaultSleep;
    this.random = opts.random ?? Math.random;
  }

  /** The route's URL with its parameters and query filled in. */
  url<R extends HttpRoute>(route: R, input: CallInput<R> = {}): URL {
    const url = new URL(this.baseUrl + fillPath(route.path, (input.params ?? {}) as Record<string, string>));
    for (const [k, v] of Object.entries((input.query ?? {}) as Query)) if (v !== undefined) url.searchParams.set(k, String(v));
    return url;
  }

  /** Calls a route and parses its JSON answer with the schema the route declares for that status. */
  async call<R extends HttpRoute>(route: R, input: CallInput<R> = {}, opts: SendOptions = {}): Promise<JsonAnswer<R>> {
    const res = await this.send(route, input, opts);
    if (res.status === 204) return undefined as JsonAnswer<R>;
    const declared = route.responses.find((r) => r.kind === "json" && r.status.includes(res.status)) ?? route.responses.find((r) => r.kind === "json");
    if (!declared || declared.kind !== "json") throw apiError("internal", `${route.method} ${route.path} has no JSON answer`, res.status);
    let data: unknown;
    try {
      data = await res.json();
    } catch (err) {
      throw apiError("internal", `${route.method} ${route.path}: the answer is not JSON`, res.status, { cause: err });
    }
    const parsed = declared.schema.safeParse(data);
    if (!parsed.success) throw apiError("internal", `${route.method} ${route.path}: the answer breaks the contract`, res.status, { cause: parsed.error });
    return parsed.data as JsonAnswer<R>;
  }

  /** Sends a request through a route; the successful response (a stream is the caller's to read), or the typed error. */
  async send<R extends HttpRoute>(route: R, input: CallInput<R> = {}, opts: SendOptions = {}): Promise<Response> {
    const retries = (opts.retry ?? route.method === "GET") ? (this.opts.maxRetries ?? 4) : 0;
    for (let attempt = 0; ; attempt++) {
      let failure: PaddockApiError;
      try {
        const res = await this.fetch(this.url(route, input), this.init(route, input, opts));
        if (res.ok) return res;
        failure = await errorOf(res);
      } catch (err) {
        if (input.signal?.aborted) throw err;
        failure = apiError("unavailable", `the gateway at ${this.baseUrl} could not be reached`, 0, { cause: err });
      }
      if (!failure.retryable || attempt >= retries || input.signal?.aborted) throw failure;
      await (failure.retryAfterMs !== undefined ? this.sleep(failure.retryAfterMs, input.signal) : this.backoff(attempt, input.signal));
    }
  }

  /** Waits before try `attempt + 1` (0-based): doubling from the first delay to 5 s, jittered by up to half. */
  backoff(attempt: number, signal?: AbortSignal): Promise<void> {
    const ms = Math.min(MAX_DELAY_MS, (this.opts.retryDelayMs ?? 200) * 2 ** Math.min(attempt, 20)) * (0.5 + 0.5 * this.random());
    return this.sleep(ms, signal);
  }

  private init<R extends HttpRoute>(route: R, input: CallInput<R>, opts: SendOptions): RequestInit {
    const headers: Record<string, string> = { authorization: `Bearer ${this.opts.token}`, accept: opts.accept ?? "application/json" };
    let body: NonNullable<RequestInit["body"]> | undefined;
    if (opts.raw !== undefined) {
      headers["content-type"] = route.body.kind === "bytes" ? route.body.contentType : "application/octet-stream";
      body = opts.raw;
    } else if (input.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(input.body);
    }
    // A streamed body goes half-duplex (what fetch asks of a ReadableStream body; not in every platform's RequestInit type).
    const streamed = typeof ReadableStream !== "undefined" && body instanceof ReadableStream ? { duplex: "half" } : {};
    return { method: route.method, headers, ...(body !== undefined ? { body } : {}), ...streamed, ...(input.signal ? { signal: input.signal } : {}) } as RequestInit;
  }
}

/** The lines of an NDJSON answer, each parsed by schema, as they arrive; a line that breaks it is an `internal` error. */
export async function* ndjson<S extends z.ZodType>(res: Response, schema: S, what: string): AsyncGenerator<z.infer<S>> {
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let rest = "";
  const parse = (line: string): z.infer<S> => {
    let data: unknown;
    try {
      data = JSON.parse(line);
    } catch (err) {
      throw apiError("internal", `${what}: a line that is not JSON`, res.status, { cause: err });
    }
    const parsed = schema.safeParse(data);
    if (!parsed.success) throw apiError("internal", `${what}: a line that breaks the contract`, res.status, { cause: parsed.error });
    return parsed.data;
  };
  try {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (err) {
        throw apiError("unavailable", `${what}: the connection was lost`, 0, { cause: err });
      }
      if (chunk.done) break;
      // Only the new text is searched for line ends: a long line arriving in many pieces costs its length once.
      let start = 0;
      for (let end = chunk.value.indexOf("\n"); end >= 0; end = chunk.value.indexOf("\n", start)) {
        const line = rest + chunk.value.slice(start, end);
        rest = "";
        start = end + 1;
        if (line.trim() !== "") yield parse(line);
      }
      rest += chunk.value.slice(start);
    }
    if (rest.trim() !== "") yield parse(rest);
  } finally {
    // A consumer that stops early ends the request (the gateway sees the close: a streamed exec is killed).
    await reader.cancel().catch(() => undefined);
  }
}
