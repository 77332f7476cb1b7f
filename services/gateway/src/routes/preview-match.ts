/**
 * Which preview a request names (docs/ports.md): by path,
 * `/v1/sessions/:id/ports/:port/<rest>` on the gateway's own origin, or by
 * host, `<port>-<session>.<preview host>` under PADDOCK_PREVIEW_ORIGIN, where
 * every path is the app's (root-relative URLs work) and the page has an
 * origin of its own.
 */
import { previewPath } from "@paddock/contracts";

export interface PreviewMatch {
  sessionId: string;
  port: number;
  /** The path the app sees (`/` and below), with the query. */
  path: string;
  /** Whether the URL lacked the slash after the port (answered with a redirect to it). */
  bare: boolean;
  /** What the app's cookies are confined to (and the preview cookie's Path). */
  prefix: string;
  /** The page shares the gateway's origin, so it runs in an opaque one (CSP sandbox). */
  sandboxed: boolean;
}

const PREVIEW = /^\/v1\/sessions\/([A-Za-z0-9_-]{1,64})\/ports\/(\d{1,5})(\/.*)?$/;
/** The first label of a preview host: `<port>-<session id>` (hosts are lowercase; session ids are). */
const HOST_LABEL = /^(\d{1,5})-([a-z0-9_-]{1,64})$/;

function validPort(text: string | undefined): number | undefined {
  const port = Number(text);
  return port >= 1 && port <= 65_535 ? port : undefined;
}

/** The preview a request path names, or undefined when it names none. */
export function matchPreview(url: string): PreviewMatch | undefined {
  const at = url.indexOf("?");
  const pathname = at < 0 ? url : url.slice(0, at);
  const m = PREVIEW.exec(pathname);
  const port = validPort(m?.[2]);
  if (!m || port === undefined) return undefined;
  const sessionId = m[1] as string;
  return { sessionId, port, path: `${m[3] ?? "/"}${at < 0 ? "" : url.slice(at)}`, bare: m[3] === undefined, prefix: previewPath(sessionId, port), sandboxed: true };
}

/** Where previews by host live: PADDOCK_PREVIEW_ORIGIN's host (lowercase, `:port` unless the scheme's default). */
export interface PreviewHosts {
  /** `preview.example.com` or `preview.localhost:8080`. */
  suffix: string;
  protocol: string;
}

export function previewHostsOf(origin: string | undefined): PreviewHosts | undefined {
  if (origin === undefined) return undefined;
  const u = new URL(origin);
  return { suffix: u.host.toLowerCase(), protocol: u.protocol };
}

/**
 * The preview a request's Host names: "none" when the host is not below the
 * preview host (the gateway's own routes), "unknown" when it is but names no
 * preview (answered 404: a preview host never reaches the API).
 */
export function matchPreviewHost(hosts: PreviewHosts | undefined, host: string | undefined, url: string): PreviewMatch | "none" | "unknown" {
  if (!hosts || host === undefined) return "none";
  const lower = host.toLowerCase();
  if (!lower.endsWith(`.${hosts.suffix}`)) return "none";
  const m = HOST_LABEL.exec(lower.slice(0, lower.length - hosts.suffix.length - 1));
  const port = validPort(m?.[1]);
  if (!m || port === undefined || !url.startsWith("/")) return "unknown";
  return { sessionId: m[2] as string, port, path: url, bare: false, prefix: "/", sandboxed: false };
}

/** A port's preview URL by host (PADDOCK_PREVIEW_ORIGIN set). */
export function previewHostUrl(hosts: PreviewHosts, sessionId: string, port: number): string {
  return `${hosts.protocol}//${port}-${sessionId}.${hosts.suffix}/`;
}
