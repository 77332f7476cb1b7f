/**
 * What of a preview's request reaches the session's app and what of its
 * answer reaches the client (docs/ports.md). Hop-by-hop headers stay on
 * their hop; the caller's bearer token never reaches the session (its app
 * could replay it); the app sees itself addressed as `localhost:<port>`
 * (dev servers refuse unknown hosts), with the original in X-Forwarded-*.
 * Its answers run in an opaque origin (CSP sandbox) and its cookies are
 * confined to its own preview path: the gateway's origin is the console's
 * and the API's, and a page a session serves must reach neither.
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http";
import { PREVIEW_COOKIE } from "@paddock/contracts";

const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host", "authorization"]);

/** The sandbox a preview's page runs in: scripts, forms and popups, never the gateway's origin. */
export const PREVIEW_CSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads allow-pointer-lock";

/** The request's headers as the app gets them; `upgrade` keeps the WebSocket handshake's own. */
export function forwardRequestHeaders(headers: IncomingHttpHeaders, port: number, upgrade: boolean): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  // Hop-by-hop also means anything the Connection header names.
  const named = new Set((headers.connection ?? "").split(",").map((h) => h.trim().toLowerCase()).filter((h) => h !== "upgrade"));
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || named.has(name) || name.startsWith("x-forwarded-")) continue;
    out[name] = value;
  }
  // The preview cookie is the gateway's: the app never sees it.
  const cookie = withoutPreviewCookie(headers.cookie);
  if (cookie === undefined) delete out.cookie;
  else out.cookie = cookie;
  out.host = `localhost:${port}`;
  if (headers.host !== undefined) out["x-forwarded-host"] = headers.host;
  out["x-forwarded-proto"] = "http";
  if (upgrade) {
    out.connection = "Upgrade";
    if (headers.upgrade !== undefined) out.upgrade = headers.upgrade;
  }
  return out;
}

/** The app's answer headers as the client gets them: hop-by-hop dropped, cookies confined to prefix, the page sandboxed (sandbox: on the gateway's origin). */
export function forwardResponseHeaders(rawHeaders: readonly string[], prefix: string, sandbox = true): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] ?? "";
    const value = rawHeaders[i + 1] ?? "";
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || (sandbox && lower === "content-security-policy")) continue;
    out.push([name, lower === "set-cookie" ? confineCookie(value, prefix) : value]);
  }
  if (sandbox) out.push(["Content-Security-Policy", PREVIEW_CSP]);
  return out;
}

/**
 * A Set-Cookie value with its Domain dropped (the cookie stays on the host
 * that set it) and its Path set to the preview's own prefix; on a preview
 * host of its own (prefix `/`) the app's Path is kept.
 */
export function confineCookie(value: string, prefix: string): string {
  const parts = value.split(";").map((p) => p.trim());
  if (prefix === "/") return parts.filter((p, i) => i === 0 || !/^domain\s*=/i.test(p)).join("; ");
  const kept = parts.filter((p, i) => i === 0 || !/^(domain|path)\s*=/i.test(p));
  return [...kept, `Path=${prefix}`].join("; ");
}

/** The raw head of a WebSocket handshake as the app gets it (the tunnel carries bytes, not requests). */
export function upgradeHead(method: string, path: string, headers: OutgoingHttpHeaders): string {
  const lines = [`${method} ${path} HTTP/1.1`];
  for (const [name, value] of Object.entries(headers)) {
    for (const v of Array.isArray(value) ? value : [value]) {
      if (v !== undefined) lines.push(`${name}: ${String(v).replace(/[\r\n]/g, "")}`);
    }
  }
  return `${lines.join("\r\n")}\r\n\r\n`;
}

/** The preview cookie's value in a Cookie header, if any. */
export function previewCookieOf(header: string | undefined): string | undefined {
  for (const part of (header ?? "").split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === PREVIEW_COOKIE) return rest.join("=");
  }
  return undefined;
}

/** The Cookie header without the preview cookie (the app never sees it); undefined when nothing is left. */
export function withoutPreviewCookie(header: string | undefined): string | undefined {
  const kept = (header ?? "")
    .split(";")
    .map((p) => p.trim())
    .filter((p) => p !== "" && p.split("=")[0] !== PREVIEW_COOKIE);
  return kept.length > 0 ? kept.join("; ") : undefined;
}
