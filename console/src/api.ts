/**
 * The console's client of the public API: every call goes through a route of
 * the HTTP contract (HttpApi, the same schemas the gateway and the CLI use),
 * same-origin, with the token as a bearer header (never in a URL). Errors are
 * ApiError with the API's stable code and message, shown as they are.
 */
import "./zod-config.ts";
import type { z } from "zod";
import { ErrorBody, fillPath, HttpApi, type BodyInput, type Checkpoint, type HttpRoute, type JsonAnswer } from "@paddock/contracts";
import { token } from "./auth.ts";

export type Query = Readonly<Record<string, string | number | boolean | undefined>>;

export interface CallInput<R extends HttpRoute> {
  readonly params?: { readonly [K in keyof z.input<R["params"]>]: string };
  readonly query?: { readonly [K in keyof z.input<R["query"]>]?: string | number | boolean | undefined };
  readonly body?: BodyInput<R>;
  readonly signal?: AbortSignal;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function urlOf(route: HttpRoute, input: CallInput<HttpRoute>): string {
  const url = new URL(fillPath(route.path, (input.params ?? {}) as Record<string, string>), location.origin);
  for (const [k, v] of Object.entries((input.query ?? {}) as Query)) if (v !== undefined) url.searchParams.set(k, String(v));
  return url.pathname + url.search;
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const t = token();
  return { ...(t ? { authorization: `Bearer ${t}` } : {}), ...extra };
}

async function failure(res: Response): Promise<ApiError> {
  const text = await res.text().catch(() => "");
  let parsed: ReturnType<typeof ErrorBody.safeParse> | undefined;
  try {
    parsed = ErrorBody.safeParse((JSON.parse(text) as { error?: unknown } | null)?.error);
  } catch {
    parsed = undefined;
  }
  if (parsed?.success) return new ApiError(res.status, parsed.data.code, parsed.data.message);
  return new ApiError(res.status, "unavailable", `the gateway answered ${res.status}`);
}

/** Sends a request through a contract route; the successful response (status < 300) or an ApiError. */
export async function send<R extends HttpRoute>(route: R, input: CallInput<R> = {}, extra: { accept?: string; rawBody?: BodyInit; contentType?: string } = {}): Promise<Response> {
  const json = input.body !== undefined;
  const res = await fetch(urlOf(route, input as CallInput<HttpRoute>), {
    method: route.method,
    headers: headers({
      ...(json ? { "content-type": "application/json" } : extra.contentType ? { "content-type": extra.contentType } : {}),
      ...(extra.accept ? { accept: extra.accept } : {}),
    }),
    ...(json ? { body: JSON.stringify(input.body) } : extra.rawBody !== undefined ? { body: extra.rawBody } : {}),
    ...(input.signal ? { signal: input.signal } : {}),
    credentials: "omit",
    cache: "no-store",
  });
  if (!res.ok) throw await failure(res);
  return res;
}

/** Calls a contract route and parses its JSON answer with the route's own schema. */
export async function call<R extends HttpRoute>(route: R, input: CallInput<R> = {}): Promise<JsonAnswer<R>> {
  const res = await send(route, input);
  if (res.status === 204) return undefined as JsonAnswer<R>;
  // The schema the route declares for this status (a 202 may answer another shape than the 200).
  const schema = route.responses.find((r) => r.kind === "json" && r.status.includes(res.status)) ?? route.responses.find((r) => r.kind === "json");
  const body: unknown = await res.json();
  return (schema && schema.kind === "json" ? schema.schema.parse(body) : body) as JsonAnswer<R>;
}

/** A snapshot of the session, waited for past one call when the runner takes long (202, then GET …/snapshots/:requestId). */
export async function takeSnapshot(id: string): Promise<Checkpoint> {
  let answer = await call(HttpApi.snapshotSession, { params: { id }, body: {} });
  while ("requestId" in answer) answer = await call(HttpApi.getSnapshot, { params: { id, requestId: answer.requestId } });
  return answer;
}

/** The lines of an NDJSON answer as parsed values, until it ends or `signal` aborts. */
export async function* ndjson(res: Response): AsyncGenerator<unknown> {
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let rest = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    rest += value;
    const lines = rest.split("\n");
    rest = lines.pop() ?? "";
    for (const line of lines) if (line.trim() !== "") yield JSON.parse(line) as unknown;
  }
}
