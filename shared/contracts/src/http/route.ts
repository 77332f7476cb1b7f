import { z } from "zod";
import { describeZodError, type ErrorCode } from "../errors.ts";

/**
 * One HTTP route of the public API, defined once: the gateway registers its
 * handler from it, the CLI calls through it, the chaos fuzzer and the test
 * fakes iterate it, and docs/api.md is generated from it. Like `Rpc` for the
 * bus: a route's shapes are zod schemas and its types are their `z.infer`.
 */
export interface HttpRoute<
  P extends z.ZodType = z.ZodType,
  Q extends z.ZodType = z.ZodType,
  B extends HttpBody = HttpBody,
  R extends HttpResponse = HttpResponse,
> {
  readonly method: HttpMethod;
  /** `/v1/sessions/:id/log`: `:name` is one segment; a final `*name` is the rest of the path. */
  readonly path: string;
  /** One line for docs/api.md. */
  readonly summary: string;
  /** Path parameters by name (strings in, parsed values out). */
  readonly params: P;
  /** The query string as an object of strings; unknown or repeated parameters are `invalid`. */
  readonly query: Q;
  readonly body: B;
  /** The answers; more than one when a query or header picks the representation (e.g. NDJSON). */
  readonly responses: readonly R[];
  /** Error codes the route answers besides the ones every authenticated route can (invalid, unauthenticated, unavailable). */
  readonly errors: readonly ErrorCode[];
}

export const HttpMethods = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const;
export type HttpMethod = (typeof HttpMethods)[number];

/** What a request carries: nothing, a JSON document, or raw bytes streamed through. */
export type HttpBody =
  | { readonly kind: "none" }
  /** optional: an empty body reads as `{}`. maxBytes: a bound below the gateway's PADDOCK_MAX_BODY_BYTES. */
  | { readonly kind: "json"; readonly schema: z.ZodType; readonly optional: boolean; readonly maxBytes?: number }
  | { readonly kind: "bytes"; readonly contentType: string };

/** One answer of a route. */
export type HttpResponse =
  | { readonly kind: "json"; readonly status: readonly number[]; readonly schema: z.ZodType; readonly when?: string }
  /** One JSON document per line, streamed; `when` says what selects it. */
  | { readonly kind: "ndjson"; readonly status: readonly number[]; readonly schema: z.ZodType; readonly when: string }
  | { readonly kind: "bytes"; readonly status: readonly number[]; readonly contentType: string; readonly headers?: Readonly<Record<string, string>> }
  | { readonly kind: "empty"; readonly status: readonly number[] }
  /** The route upgrades to a WebSocket whose server frames are schema. */
  | { readonly kind: "websocket"; readonly status: readonly number[]; readonly schema: z.ZodType };

/** The JSON answer of a route (its first json response), as a type. */
export type JsonAnswer<R extends HttpRoute> = Extract<R["responses"][number], { kind: "json" }> extends { schema: infer S extends z.ZodType } ? z.infer<S> : never;
/** The parsed body of a JSON route. */
export type BodyOf<R extends HttpRoute> = R["body"] extends { kind: "json"; schema: infer S extends z.ZodType } ? z.infer<S> : undefined;
/** What a client sends as the body (before defaults apply). */
export type BodyInput<R extends HttpRoute> = R["body"] extends { kind: "json"; schema: infer S extends z.ZodType } ? z.input<S> : undefined;
export type ParamsOf<R extends HttpRoute> = z.infer<R["params"]>;
export type QueryOf<R extends HttpRoute> = z.infer<R["query"]>;

/** Content type of a streamed list: one JSON document per line. */
export const NDJSON = "application/x-ndjson";

/** An empty path-parameter set. */
export const NoParams = z.object({}).strict();
/** An empty query: routes that take none refuse unknown parameters. */
export const NoQuery = z.object({}).strict();
/** A body of no fields: empty, or `{}`. */
export const EmptyBody = z.object({}).strict();

export const noBody = { kind: "none" } as const;

export function jsonBody<S extends z.ZodType>(schema: S, opts: { optional?: boolean; maxBytes?: number } = {}) {
  return { kind: "json", schema, optional: opts.optional ?? false, ...(opts.maxBytes !== undefined ? { maxBytes: opts.maxBytes } : {}) } as const;
}

export function json<S extends z.ZodType>(schema: S, status: readonly number[] = [200], when?: string) {
  return { kind: "json", status, schema, ...(when !== undefined ? { when } : {}) } as const;
}

/** Builds a route; params, query and errors default to none. */
export function httpRoute<
  const M extends HttpMethod,
  P extends z.ZodType = typeof NoParams,
  Q extends z.ZodType = typeof NoQuery,
  B extends HttpBody = typeof noBody,
  const R extends HttpResponse = HttpResponse,
>(def: {
  method: M;
  path: string;
  summary: string;
  params?: P;
  query?: Q;
  body?: B;
  responses: readonly R[];
  errors?: readonly ErrorCode[];
}): HttpRoute<P, Q, B, R> & { method: M } {
  return {
    method: def.method,
    path: def.path,
    summary: def.summary,
    params: (def.params ?? NoParams) as P,
    query: (def.query ?? NoQuery) as Q,
    body: (def.body ?? noBody) as B,
    responses: def.responses,
    errors: def.errors ?? [],
  };
}

/** The names of a path's parameters, in order (`*rest` included). */
export function pathParamNames(path: string): string[] {
  return path
    .split("/")
    .filter((seg) => seg.startsWith(":") || seg.startsWith("*"))
    .map((seg) => seg.slice(1));
}

/** A path as a RegExp with one group per parameter: `:name` one segment, a final `*name` the rest. */
export function pathPattern(path: string): RegExp {
  const source = path
    .split("/")
    .map((seg) => {
      if (seg.startsWith(":")) return "([^/]+)";
      if (seg.startsWith("*")) return "(.*)";
      return seg.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    })
    .join("/");
  return new RegExp(`^${source}$`);
}

/** A concrete path: each parameter URI-encoded (a `*rest` keeps its slashes). */
export function fillPath(path: string, params: Readonly<Record<string, string | number>>): string {
  return path
    .split("/")
    .map((seg) => {
      if (!seg.startsWith(":") && !seg.startsWith("*")) return seg;
      const value = params[seg.slice(1)];
      if (value === undefined) throw new Error(`${path}: missing path parameter ${seg.slice(1)}`);
      return seg.startsWith("*") ? String(value).split("/").map(encodeURIComponent).join("/") : encodeURIComponent(String(value));
    })
    .join("/");
}

/** `GET /v1/sessions/:id`: a route's name (metric label, docs heading). */
export function routeName(r: Pick<HttpRoute, "method" | "path">): string {
  return `${r.method} ${r.path}`;
}

/** A request's input parsed by its route's schemas, or where and why it is invalid (the gateway's 400 message). */
export function parseHttpInput(
  route: HttpRoute,
  raw: { params: Record<string, string>; query: URLSearchParams; bodyText?: string },
): { ok: true; params: unknown; query: unknown; body: unknown } | { ok: false; message: string } {
  const params = route.params.safeParse(raw.params);
  if (!params.success) return { ok: false, message: `path: ${describeZodError(params.error)}` };
  const keys = [...raw.query.keys()];
  const repeated = keys.find((k, i) => keys.indexOf(k) !== i);
  if (repeated !== undefined) return { ok: false, message: `query: ${repeated} given more than once` };
  const query = route.query.safeParse(Object.fromEntries(raw.query));
  if (!query.success) return { ok: false, message: `query: ${describeZodError(query.error)}` };
  if (route.body.kind !== "json") return { ok: true, params: params.data, query: query.data, body: undefined };
  const text = raw.bodyText ?? "";
  let json: unknown;
  try {
    json = text === "" && route.body.optional ? {} : (JSON.parse(text) as unknown);
  } catch {
    return { ok: false, message: "body is not valid JSON" };
  }
  const body = route.body.schema.safeParse(json);
  if (!body.success) return { ok: false, message: `body: ${describeZodError(body.error)}` };
  return { ok: true, params: params.data, query: query.data, body: body.data };
}
