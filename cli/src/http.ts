import type { z } from "zod";
import { ErrorBody, ErrorCode, fillPath, httpStatusOf, MAX_PAGE_LIMIT, describeZodError, type BodyInput, type HttpRoute, type JsonAnswer } from "@paddock/contracts";
import { PaddockApiError, Transport, type SendOptions } from "@paddock/sdk";
import { ApiError } from "./io.ts";

export type Query = Readonly<Record<string, string | number | boolean | undefined>>;

/** What a call through a contract route sends: its path parameters, query and JSON body, typed by the route. */
export interface CallInput<R extends HttpRoute> {
  readonly params?: { readonly [K in keyof z.input<R["params"]>]: string };
  readonly query?: { readonly [K in keyof z.input<R["query"]>]?: string | number | boolean | undefined };
  readonly body?: BodyInput<R>;
}

/** The route's concrete path and query. */
function target<R extends HttpRoute>(route: R, input: CallInput<R>): { path: string; query: Query } {
  return { path: fillPath(route.path, (input.params ?? {}) as Record<string, string>), query: (input.query ?? {}) as Query };
}

/** The schema of a route's JSON answer. */
/** The JSON schema the route declares for status (a 202 may answer another shape than the 200), else its first. */
function answerSchema(route: HttpRoute, status: number): z.ZodType {
  const json = route.responses.find((r) => r.kind === "json" && r.status.includes(status)) ?? route.responses.find((r) => r.kind === "json");
  if (!json || json.kind !== "json") throw new Error(`${route.method} ${route.path} has no JSON answer`);
  return json.schema;
}

export interface RequestOptions {
  /** The media type asked for (JSON unless said): NDJSON for a route's streamed form. */
  readonly accept?: string;
  /** Aborting it ends the request (and a streamed answer) on the gateway's side too. */
  readonly signal?: AbortSignal;
}

/**
 * A client of the public HTTP API, on the SDK's transport (`@paddock/sdk`):
 * every call goes through a route of the HTTP contract (HttpApi), and every
 * JSON answer is parsed by that route's schema. The CLI asks once (no
 * retries: a person sees a failure at once and may run the command again)
 * and says what went wrong in its own words (`ApiError`, exit codes).
 */
export class ApiClient {
  private readonly transport: Transport;

  constructor(
    readonly baseUrl: string,
    readonly token: string,
  ) {
    this.transport = new Transport({ baseUrl, token, maxRetries: 0 });
  }

  url(path: string, query: Query = {}): URL {
    const url = new URL(this.baseUrl + path);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
    return url;
  }

  get authHeader(): string {
    return `Bearer ${this.token}`;
  }

  /** Calls a contract route and parses its JSON answer with the route's schema. */
  async call<R extends HttpRoute>(route: R, input: CallInput<R> = {}): Promise<JsonAnswer<R>> {
    const res = await this.send(route, input, {});
    const what = `${route.method} ${target(route, input).path}`;
    const text = await res.text();
    let data: unknown;
    try {
      data = JSON.parse(text);
    } catch {
      throw new ApiError("internal", `${what}: the gateway answered HTTP ${String(res.status)} with a body that is not JSON`);
    }
    const parsed = answerSchema(route, res.status).safeParse(data);
    if (!parsed.success) throw new ApiError("internal", `${what}: unexpected answer: ${describeZodError(parsed.error)}`);
    return parsed.data as JsonAnswer<R>;
  }

  /** Calls a contract route whose answer is streamed (bytes, NDJSON); returns the successful response. */
  open<R extends HttpRoute>(route: R, input: CallInput<R> = {}, opts: Pick<RequestOptions, "accept" | "signal"> = {}): Promise<Response> {
    return this.send(route, { ...input, signal: opts.signal }, opts.accept !== undefined ? { accept: opts.accept } : {});
  }

  /** Streams body (chunked; never held in memory) to a contract route that takes raw bytes; an error answer is thrown. */
  uploadTo<R extends HttpRoute>(route: R, input: Omit<CallInput<R>, "body">, body: ReadableStream<Uint8Array>, signal?: AbortSignal): Promise<Response> {
    if (route.body.kind !== "bytes") throw new Error(`${route.method} ${route.path} takes no raw body`);
    return this.send(route, { ...input, signal }, { raw: body });
  }

  /**
   * Walks every page of a list endpoint by nextCursor, up to max items. The
   * next page is asked for with query parameter cursorParam (`cursor` for
   * sessions and runners; `since` for events, whose cursor is a stream position).
   */
  async listAll<R extends HttpRoute, T>(
    route: R,
    itemsOf: (page: JsonAnswer<R>) => T[],
    opts: { query?: CallInput<R>["query"]; max?: number; cursorParam?: string } = {},
  ): Promise<T[]> {
    const max = opts.max ?? Number.POSITIVE_INFINITY;
    const items: T[] = [];
    let cursor: string | undefined;
    for (;;) {
      const limit = Math.min(MAX_PAGE_LIMIT, max - items.length);
      const query = { ...opts.query, limit, [opts.cursorParam ?? "cursor"]: cursor } as CallInput<R>["query"];
      const page = (await this.call(route, query === undefined ? {} : { query })) as JsonAnswer<R> & { nextCursor?: string | undefined };
      items.push(...itemsOf(page));
      cursor = page.nextCursor;
      if (!cursor || items.length >= max) return items.slice(0, max);
    }
  }

  /** The SDK's send, once; its typed errors said as the CLI says them. */
  private async send<R extends HttpRoute>(route: R, input: CallInput<R> & { signal?: AbortSignal | undefined }, opts: SendOptions): Promise<Response> {
    try {
      return await this.transport.send(route, input, { ...opts, retry: false });
    } catch (err) {
      if (!(err instanceof PaddockApiError)) throw err;
      // No answer at all (status 0): what the platform's fetch said.
      if (err.status === 0) throw unreachable(this.baseUrl, err.cause);
      throw new ApiError(err.code, err.message.replace(/^the gateway answered (HTTP \d+)$/, "$1"), err.status);
    }
  }
}

/**
 * The lines of an NDJSON answer, each parsed by schema, as they arrive. A
 * line that is not JSON or not the schema's is an ApiError `internal`; the
 * connection lost mid-stream is `unavailable` (what names it is `what`).
 */
export async function* ndjsonOf<S extends z.ZodType>(res: Response, schema: S, what: string): AsyncGenerator<z.infer<S>> {
  if (!res.body) throw new ApiError("internal", `${what}: the gateway answered without a body`);
  const decoder = new TextDecoder();
  let buf = "";
  const parse = (line: string): z.infer<S> => {
    let data: unknown;
    try {
      data = JSON.parse(line);
    } catch {
      throw new ApiError("internal", `${what}: the stream carried a line that is not JSON`);
    }
    const parsed = schema.safeParse(data);
    if (!parsed.success) throw new ApiError("internal", `${what}: unexpected line: ${describeZodError(parsed.error)}`);
    return parsed.data;
  };
  const reader = res.body.getReader();
  try {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch {
        throw new ApiError("unavailable", `${what}: the connection to the gateway was lost`);
      }
      if (chunk.done) break;
      buf += decoder.decode(chunk.value, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) !== -1) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim() !== "") yield parse(line);
      }
    }
    if (buf.trim() !== "") yield parse(buf);
  } finally {
    // A consumer that stops early (an exit frame, an abort) releases the connection.
    await reader.cancel().catch(() => undefined);
  }
}

export function unreachable(baseUrl: string, err: unknown): ApiError {
  const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err);
  return new ApiError("unavailable", `cannot reach the gateway at ${baseUrl}: ${cause}`);
}

export function errorFromText(status: number, text: string): ApiError {
  try {
    const data = JSON.parse(text) as unknown;
    const body = ErrorBody.safeParse((data as { error?: unknown } | null)?.error);
    if (body.success) return new ApiError(body.data.code, body.data.message, status);
  } catch {
    // not JSON: described below
  }
  return new ApiError(codeOfStatus(status), `HTTP ${String(status)}`, status);
}

/** The contract's code of an HTTP status (its httpStatusOf, inverted); 500 and anything unknown ≥ 500 is internal. */
function codeOfStatus(status: number): string {
  const code = Object.values(ErrorCode).find((c) => c !== ErrorCode.internal && httpStatusOf[c] === status);
  return code ?? (status >= 500 ? "internal" : "invalid");
}
