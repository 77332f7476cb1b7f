import type { IncomingMessage, ServerResponse } from "node:http";
import type { AuditEntry, AuditEvent, ErrorBody, HttpRouteName } from "@paddock/contracts";

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

export async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/** The event as the gateway answers it: with its place in the stream (the fake's is its index, from 1). */
export function entryOf(event: AuditEvent, index: number): AuditEntry {
  return { ...event, seq: index + 1 };
}
