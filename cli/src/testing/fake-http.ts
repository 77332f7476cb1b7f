import type { ServerResponse } from "node:http";
import type { ErrorBody } from "@paddock/contracts";

export function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

export function fail(res: ServerResponse, status: number, error: ErrorBody): void {
  send(res, status, { error });
}
