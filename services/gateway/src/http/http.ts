import type { IncomingMessage, ServerResponse } from "node:http";
import type { z } from "zod";
import {
  describeZodError,
  httpStatusOf,
  InvalidError,
  jsonDepthExceeds,
  MAX_JSON_DEPTH,
  TooLargeError,
  pathParamNames,
  pathPattern,
  type BodyOf,
  type ErrorBody,
  type HttpBody,
  type HttpRoute,
  type JsonAnswer,
  type ParamsOf,
  type QueryOf,
} from "@paddock/contracts";
import { toPaddockError } from "@paddock/bus";

/** A matched request: path parameters and the query, as received. */
export interface RouteContext {
  req: IncomingMessage;
  res: ServerResponse;
  params: Record<string, string>;
  query: URLSearchParams;
}

export type RouteHandler = (ctx: RouteContext) => Promise<void>;

export interface Route {
  method: string;
  /** Name used as a metric label, e.g. "GET /v1/sessions/:id". */
  name: string;
  pattern: RegExp;
  paramNames: string[];
  handler: RouteHandler;
}

/** What a contract route's handler is given: everything parsed by the contract's schemas. */
export interface Input<R extends HttpRoute, A> {
  req: IncomingMessage;
  res: ServerResponse;
  /** Who is calling, as the route's authenticate step found. */
  caller: A;
  params: ParamsOf<R>;
  query: QueryOf<R>;
  /**
   * The JSON body parsed by the contract's schema (read on the first call, so
   * a route may authorize before it reads); undefined for a route without one.
   */
  body: () => Promise<BodyOf<R>>;
}

/** A JSON answer of the route's contract, or 204; a handler that streamed its own answer returns nothing. */
export type Answer<R extends HttpRoute> = { status: number; body: JsonAnswer<R> } | { status: 204 };

export interface ServeOptions<A> {
  /** First of all: an unauthenticated request learns nothing about its input. */
  authenticate: (req: IncomingMessage) => Promise<A>;
  /**
   * Called just before authenticate, with the raw path parameters, when the
   * path and query parse: for reads the handler may take (nothing is
   * answered from it, and bad input still calls nothing).
   */
  early?: (req: IncomingMessage, params: Record<string, string>) => void;
  /** Bound of a JSON body, unless the route's contract sets its own. */
  maxBodyBytes: number;
}

/**
 * Serves one contract route: authenticate, then the path parameters and the
 * query parsed by the contract's schemas (bad input is `invalid`), then the
 * handler; a JSON answer is sent as the contract's response.
 */
export function serve<R extends HttpRoute, A>(contract: R, opts: ServeOptions<A>, handler: (input: Input<R, A>) => Promise<Answer<R> | void>): Route {
  return route(contract.method, contract.path, async ({ req, res, params, query }) => {
    if (opts.early && contract.params.safeParse(params).success && contract.query.safeParse(queryObject(query)).success) opts.early(req, params);
    const caller = await opts.authenticate(req);
    const parsedParams = parseWith(contract.params, params, "path") as ParamsOf<R>;
    const parsedQuery = parseWith(contract.query, queryObject(query), "query") as QueryOf<R>;
    let reading: Promise<BodyOf<R>> | undefined;
    const body = () => (reading ??= readBody(contract.body, req, opts.maxBodyBytes) as Promise<BodyOf<R>>);
    const answer = await handler({ req, res, caller, params: parsedParams, query: parsedQuery, body });
    if (!answer) return;
    if (!("body" in answer)) {
      res.writeHead(answer.status, { "cache-control": "no-store" });
      res.end();
      return;
    }
    sendJson(res, answer.status, answer.body);
  });
}

async function readBody(spec: HttpBody, req: IncomingMessage, maxBodyBytes: number): Promise<unknown> {
  if (spec.kind !== "json") return undefined;
  const max = spec.maxBytes ?? maxBodyBytes;
  const raw = spec.optional ? await readOptionalJsonBody(req, max) : await readJsonBody(req, max);
  return parseWith(spec.schema, raw, "body");
}

/** Builds a route from a path like "/v1/sessions/:id/log". */
export function route(method: string, path: string, handler: RouteHandler): Route {
  return { method, name: `${method} ${path}`, pattern: pathPattern(path), paramNames: pathParamNames(path), handler };
}

export type Match =
  | { kind: "found"; route: Route; params: Record<string, string> }
  | { kind: "method_not_allowed"; allow: string[] }
  | { kind: "none" };

export function matchRoute(routes: readonly Route[], method: string, path: string): Match {
  const allow: string[] = [];
  for (const r of routes) {
    const m = r.pattern.exec(path);
    if (!m) continue;
    if (r.method !== method) {
      allow.push(r.method);
      continue;
    }
    const params: Record<string, string> = {};
    r.paramNames.forEach((name, i) => {
      params[name] = decodeURIComponentSafe(m[i + 1] ?? "");
    });
    return { kind: "found", route: r, params };
  }
  return allow.length ? { kind: "method_not_allowed", allow } : { kind: "none" };
}

function decodeURIComponentSafe(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s; // fails Id validation downstream
  }
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    "cache-control": "no-store",
    ...headers,
  });
  res.end(text);
}

/** The status and body of an error; anything that is not a PaddockError is `internal` with no detail. */
export function errorResponse(err: unknown): { status: number; body: { error: ErrorBody } } {
  const e = toPaddockError(err);
  return { status: httpStatusOf[e.code], body: { error: e.toBody() } };
}

export function sendError(res: ServerResponse, err: unknown, headers: Record<string, string> = {}): void {
  const { status, body } = errorResponse(err);
  if (res.headersSent) {
    res.destroy(); // mid-stream failure: the client sees a truncated body, never a wrong one
    return;
  }
  sendJson(res, status, body, headers);
}

/** Validates a value against a schema, turning zod issues into `invalid`. */
export function parseWith<S extends z.ZodType>(schema: S, value: unknown, what: string): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new InvalidError(`${what}: ${describeZodError(parsed.error)}`);
  return parsed.data;
}

/** Query parameters as an object; a repeated parameter is invalid. */
export function queryObject(query: URLSearchParams): Record<string, string> {
  // No prototype: `?__proto__=x` must become a key (and be refused as unknown),
  // not an ignored prototype assignment (found by `pnpm chaos`).
  const out = Object.create(null) as Record<string, string>;
  for (const [k, v] of query) {
    if (Object.hasOwn(out, k)) throw new InvalidError(`query: ${k} given more than once`);
    out[k] = v;
  }
  return out;
}

/** A raw body whole, copied once: too_large (`<what> exceeds N bytes`) as soon as it passes maxBytes, the rest not read. */
export async function readBodyBytes(req: IncomingMessage, maxBytes: number, what: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const part of req as AsyncIterable<Buffer>) {
    size += part.byteLength;
    if (size > maxBytes) throw new TooLargeError(`${what} exceeds ${maxBytes} bytes`);
    parts.push(part);
  }
  return Buffer.concat(parts, size);
}

/**
 * Reads a JSON body of at most maxBytes. A larger body is too_large. So that a
 * client still sending gets the answer instead of a reset connection, the rest
 * of an oversized body is read and discarded first — up to DISCARD_LIMIT_BYTES
 * in all and for at most DISCARD_WINDOW_MS; past either, reading stops at once
 * and the connection is closed.
 */
export async function readJsonBody(req: IncomingMessage, maxBytes: number): Promise<unknown> {
  return parseJson(await readBodyText(req, maxBytes));
}

/** How much of an oversized body is read and thrown away before answering 413. */
export const DISCARD_LIMIT_BYTES = 16 * 1024 * 1024;
/** How long the rest of an oversized body is waited for (a client that never ends it is not waited on). */
export const DISCARD_WINDOW_MS = 1_000;

/** Like readJsonBody, but an empty body (no bytes) reads as `{}`: for POSTs that take no fields. */
export async function readOptionalJsonBody(req: IncomingMessage, maxBytes: number): Promise<unknown> {
  const text = await readBodyText(req, maxBytes);
  return text === "" ? {} : parseJson(text);
}

function parseJson(text: string): unknown {
  // Checked on the text: a parsed value that deep cannot even be encoded again.
  if (jsonDepthExceeds(text)) throw new InvalidError(`body: JSON nested deeper than ${String(MAX_JSON_DEPTH)}`);
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new InvalidError("body is not valid JSON", { cause: err });
  }
}

async function readBodyText(req: IncomingMessage, maxBytes: number): Promise<string> {
  const declared = req.headers["content-length"];
  const tooLarge = () => new TooLargeError(`body exceeds ${maxBytes} bytes`);
  if (declared !== undefined && Number(declared) > DISCARD_LIMIT_BYTES) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  await new Promise<void>((resolve, reject) => {
    let discarding: NodeJS.Timeout | undefined;
    const refuse = () => {
      cleanup();
      req.pause();
      reject(tooLarge());
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > DISCARD_LIMIT_BYTES) return refuse();
      if (size <= maxBytes) chunks.push(chunk);
      // Past the limit: keep reading to the end (keeping nothing), but not for long.
      else discarding ??= setTimeout(refuse, DISCARD_WINDOW_MS);
    };
    const onEnd = () => {
      cleanup();
      if (size > maxBytes) reject(tooLarge());
      else resolve();
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    const cleanup = () => {
      clearTimeout(discarding);
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
  });
  return Buffer.concat(chunks).toString("utf8");
}

/** Resolves once the response can take more (drain), or is gone (close). */
export function drainOrClose(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off("drain", done);
      res.off("close", done);
      resolve();
    };
    res.once("drain", done);
    res.once("close", done);
  });
}
