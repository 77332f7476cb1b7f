/**
 * Same-origin check on state-changing calls (issue 27). The API authenticates
 * by bearer token only (no cookie a browser would attach on its own), so a
 * foreign page cannot act as a user anyway; this is the second line: a browser
 * request that says it comes from another page's origin is refused before it
 * is authenticated, read or acted on. Requests without `Origin` (the CLI,
 * SDKs, curl) are not browser requests and pass.
 */
import type { IncomingMessage } from "node:http";
import { ForbiddenError } from "@paddock/contracts";

const STATE_CHANGING = new Set(["POST", "PUT", "PATCH", "DELETE"]);

/**
 * Throws `forbidden` when a POST/PUT/PATCH/DELETE carries an `Origin` that is
 * neither the gateway's own (`http(s)://` + the request's Host, as the browser
 * addressed it) nor one of `allowedOrigins` (lower-cased, exact
 * `scheme://host[:port]`, PADDOCK_ALLOWED_ORIGINS). `Origin: null` (sandboxed
 * frames, file: pages) is foreign.
 */
export function refuseForeignOrigin(req: IncomingMessage, allowedOrigins: readonly string[]): void {
  if (!STATE_CHANGING.has((req.method ?? "GET").toUpperCase())) return;
  if (!isAllowedOrigin(req, allowedOrigins)) throw new ForbiddenError("origin not allowed");
}

/**
 * True without an `Origin`, or with the gateway's own or an allowed one. The
 * terminal and files-watch upgrades ask it too: the console the gateway
 * serves opens its sockets from the gateway's own origin.
 */
export function isAllowedOrigin(req: IncomingMessage, allowedOrigins: readonly string[]): boolean {
  const origin = req.headers.origin;
  if (origin === undefined) return true;
  const o = origin.trim().toLowerCase();
  const host = req.headers.host?.trim().toLowerCase();
  if (host && (o === `http://${host}` || o === `https://${host}`)) return true;
  return allowedOrigins.includes(o);
}
