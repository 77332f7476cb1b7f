import type { ServerResponse } from "node:http";
import type { ErrorBody, HttpRouteName } from "@paddock/contracts";

/** A request the fake serves: its contract route and its input, parsed by that route's schemas. */
export interface FakeCall {
  readonly name: HttpRouteName;
  readonly params: unknown;
  readonly query: unknown;
  /** The query as sent (tests assert on what the CLI asked). */
  readonly rawQuery: URLSearchParams;
  readonly body: unknown;
}

export function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

export function fail(res: ServerResponse, status: number, error: ErrorBody): void {
  send(res, status, { error });
}
