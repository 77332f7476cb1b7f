import type { z } from "zod";
import { ErrorBody, MAX_PAGE_LIMIT, describeZodError } from "@paddock/contracts";
import { ApiError } from "./io.ts";

export type Query = Readonly<Record<string, string | number | boolean | undefined>>;

export interface RequestOptions {
  readonly query?: Query;
  readonly body?: unknown;
}

/** A client of the public HTTP API; every JSON answer is validated with a contract schema. */
export class ApiClient {
  constructor(
    readonly baseUrl: string,
    readonly token: string,
  ) {}

  url(path: string, query: Query = {}): URL {
    const url = new URL(this.baseUrl + path);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
    return url;
  }

  get authHeader(): string {
    return `Bearer ${this.token}`;
  }

  /** Sends a request and parses a JSON answer with schema. */
  async json<S extends z.ZodType>(method: string, path: string, schema: S, opts: RequestOptions = {}): Promise<z.infer<S>> {
    const res = await this.send(method, path, opts);
    const text = await res.text();
    let data: unknown;
    try {
      data = JSON.parse(text);
    } catch {
      throw new ApiError("internal", `${method} ${path}: the gateway answered HTTP ${String(res.status)} with a body that is not JSON`);
    }
    const parsed = schema.safeParse(data);
    if (!parsed.success) {
      throw new ApiError("internal", `${method} ${path}: unexpected answer: ${describeZodError(parsed.error)}`);
    }
    return parsed.data;
  }

  /** Sends a request and returns the successful response to stream its body. */
  async raw(method: string, path: string, opts: RequestOptions = {}): Promise<Response> {
    return this.send(method, path, opts);
  }

  /**
   * Sends a streamed body (chunked; never held in memory) and returns the
   * successful response; an error answer is thrown as its ApiError.
   */
  async upload(method: string, path: string, body: ReadableStream<Uint8Array>, opts: { query?: Query; contentType?: string } = {}): Promise<Response> {
    const headers = { authorization: this.authHeader, accept: "application/json", "content-type": opts.contentType ?? "application/octet-stream" };
    let res: Response;
    try {
      res = await fetch(this.url(path, opts.query), { method, headers, body, duplex: "half" } as RequestInit);
    } catch (err) {
      throw unreachable(this.baseUrl, err);
    }
    if (!res.ok) throw await errorOf(res);
    return res;
  }

  /**
   * Walks every page of a list endpoint by nextCursor, up to max items. The
   * next page is asked for with query parameter cursorParam (`cursor` for
   * sessions and runners; `since` for events, whose cursor is a stream position).
   */
  async listAll<P extends { nextCursor?: string | undefined }, T>(
    path: string,
    schema: z.ZodType<P>,
    itemsOf: (page: P) => T[],
    opts: { query?: Query; max?: number; cursorParam?: string } = {},
  ): Promise<T[]> {
    const max = opts.max ?? Number.POSITIVE_INFINITY;
    const items: T[] = [];
    let cursor: string | undefined;
    for (;;) {
      const limit = Math.min(MAX_PAGE_LIMIT, max - items.length);
      const page = await this.json("GET", path, schema, { query: { ...opts.query, limit, [opts.cursorParam ?? "cursor"]: cursor } });
      items.push(...itemsOf(page));
      cursor = page.nextCursor;
      if (!cursor || items.length >= max) return items.slice(0, max);
    }
  }

  private async send(method: string, path: string, opts: RequestOptions): Promise<Response> {
    const headers: Record<string, string> = { authorization: this.authHeader, accept: "application/json" };
    let body: string | undefined;
    if (opts.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(opts.body);
    }
    let res: Response;
    try {
      res = await fetch(this.url(path, opts.query), { method, headers, body });
    } catch (err) {
      throw unreachable(this.baseUrl, err);
    }
    if (!res.ok) throw await errorOf(res);
    return res;
  }
}

export function unreachable(baseUrl: string, err: unknown): ApiError {
  const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err);
  return new ApiError("unavailable", `cannot reach the gateway at ${baseUrl}: ${cause}`);
}

/** Reads an error answer: the contract's `{error: {code, message}}`, or a description of what came instead. */
export async function errorOf(res: { status: number; text(): Promise<string> }): Promise<ApiError> {
  const text = await res.text().catch(() => "");
  return errorFromText(res.status, text);
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

function codeOfStatus(status: number): string {
  const codes: Record<number, string> = {
    400: "invalid",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "too_large",
    429: "rate_limited",
    503: "unavailable",
  };
  return codes[status] ?? (status >= 500 ? "internal" : "invalid");
}
