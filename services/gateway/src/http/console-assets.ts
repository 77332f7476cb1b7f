/**
 * The web console's static files (issue 27), served at `/` from the directory
 * `PADDOCK_CONSOLE_DIR` names (the Vite build, `console/dist`).
 *
 * The directory is listed once, when the gateway starts listening: only the
 * regular files found then are served, held in memory (the console is a few
 * hundred KB), looked up by the exact request path. Nothing is ever resolved
 * from a request against the file system, so `..`, encoded dots, NULs,
 * backslashes and symlinks cannot reach outside it: a path that is not a key
 * of the listing is simply not found. A rebuilt console is served after the
 * gateway restarts.
 */
import { createHash } from "node:crypto";
import { lstat, readdir, readFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import { gzipSync } from "node:zlib";

/**
 * The console's Content-Security-Policy: scripts only from the gateway's own
 * origin (no inline script, no eval), requests only to it (`'self'` covers
 * its ws:/wss: too), nothing framed, no <base> rewrites. Styles allow inline
 * because xterm.js writes its dimensions and colours into <style> elements
 * and `style` attributes it creates at run time (decision 0055).
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join("; ");

const CONTENT_TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  mjs: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
  svg: "image/svg+xml",
  woff2: "font/woff2",
  woff: "font/woff",
  png: "image/png",
  ico: "image/x-icon",
  json: "application/json",
  map: "application/json",
  txt: "text/plain; charset=utf-8",
  webmanifest: "application/manifest+json",
};
/** Text worth compressing: compressed once at load, sent to clients that accept gzip. */
const COMPRESSIBLE = new Set(["html", "js", "mjs", "css", "svg", "json", "map", "txt", "webmanifest"]);
/** Hashed names (`assets/…`) never change content: cached for a year. Everything else is revalidated. */
const IMMUTABLE = "public, max-age=31536000, immutable";
const REVALIDATE = "no-cache";
/** Bounds of what is loaded: the console is small; anything past this is not a console build. */
const MAX_FILES = 2_000;
const MAX_TOTAL_BYTES = 64 * 1024 * 1024;

/** Headers on every console answer, the not-built page included. */
const COMMON_HEADERS = { "x-content-type-options": "nosniff", "referrer-policy": "no-referrer" } as const;

interface Asset {
  body: Buffer;
  gzip: Buffer | undefined;
  contentType: string;
  cacheControl: string;
  etag: string;
  html: boolean;
}

export type ConsoleState = { kind: "loaded"; files: number; bytes: number } | { kind: "missing"; reason: string };

const NOT_BUILT_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Paddock console not built</title></head>
<body><h1>The Paddock console is not built</h1>
<p>This gateway serves the API at <code>/v1</code>, but found no console to serve at <code>/</code>.
Build it with <code>npm run build:console</code> (or point <code>PADDOCK_CONSOLE_DIR</code> at a build) and restart the gateway.</p>
</body></html>
`;

export class ConsoleAssets {
  private files = new Map<string, Asset>();
  private state: ConsoleState = { kind: "missing", reason: "not loaded yet" };

  constructor(private readonly dir: string) {}

  /** Lists and reads the directory; a missing or unreadable one leaves the console "not built" (never throws). */
  async load(): Promise<ConsoleState> {
    const files = new Map<string, Asset>();
    try {
      let total = 0;
      for (const rel of await listRegularFiles(this.dir)) {
        const body = await readFile(join(this.dir, ...rel));
        total += body.length;
        if (files.size >= MAX_FILES || total > MAX_TOTAL_BYTES) throw new Error(`more than ${MAX_FILES} files or ${MAX_TOTAL_BYTES} bytes`);
        const asset = assetOf(rel, body);
        if (asset) files.set(`/${rel.join("/")}`, asset);
      }
      if (!files.has("/index.html")) throw new Error("no index.html");
      this.files = files;
      this.state = { kind: "loaded", files: files.size, bytes: total };
    } catch (err) {
      this.files = new Map();
      this.state = { kind: "missing", reason: `${this.dir}: ${err instanceof Error ? err.message : String(err)}` };
    }
    return this.state;
  }

  get loaded(): ConsoleState {
    return this.state;
  }

  /**
   * Answers a GET or HEAD of a console file and returns true; returns false
   * (the caller answers 404) for anything else. `/` is index.html; without a
   * build, `/` and `/index.html` answer a page saying how to build it (503).
   */
  serve(req: IncomingMessage, res: ServerResponse, rawPath: string): boolean {
    const method = req.method ?? "GET";
    if (method !== "GET" && method !== "HEAD") return false;
    const path = rawPath === "/" ? "/index.html" : rawPath;
    const asset = this.files.get(path);
    if (!asset) {
      if (path !== "/index.html") return false;
      const body = Buffer.from(NOT_BUILT_PAGE);
      res.writeHead(503, { ...COMMON_HEADERS, "content-type": CONTENT_TYPES.html, "content-length": body.length, "cache-control": "no-store", "content-security-policy": CONSOLE_CSP });
      res.end(method === "HEAD" ? undefined : body);
      return true;
    }
    const headers: Record<string, string | number> = {
      ...COMMON_HEADERS,
      "content-type": asset.contentType,
      "cache-control": asset.cacheControl,
      etag: asset.etag,
      vary: "accept-encoding",
    };
    if (asset.html) headers["content-security-policy"] = CONSOLE_CSP;
    if (matchesEtag(req.headers["if-none-match"], asset.etag)) {
      res.writeHead(304, headers);
      res.end();
      return true;
    }
    const gzip = asset.gzip !== undefined && acceptsGzip(req.headers["accept-encoding"]);
    const body = gzip ? (asset.gzip as Buffer) : asset.body;
    if (gzip) headers["content-encoding"] = "gzip";
    headers["content-length"] = body.length;
    res.writeHead(200, headers);
    res.end(method === "HEAD" ? undefined : body);
    return true;
  }
}

/** Every regular file under `dir`, as path segments; symlinks, devices and the like are skipped, never followed. */
async function listRegularFiles(dir: string, prefix: string[] = [], depth = 0): Promise<string[][]> {
  if (depth > 8) return [];
  const out: string[][] = [];
  for (const entry of await readdir(join(dir, ...prefix), { withFileTypes: true })) {
    // Only names a URL path can carry as is: anything else would need decoding to be asked for.
    if (!/^[A-Za-z0-9._~-]+$/.test(entry.name) || entry.name.startsWith(".")) continue;
    const rel = [...prefix, entry.name];
    if (entry.isDirectory()) out.push(...(await listRegularFiles(dir, rel, depth + 1)));
    // lstat again: readdir's type is of the entry itself (a symlink is not a file), checked once more for a race.
    else if (entry.isFile() && (await lstat(join(dir, ...rel))).isFile()) out.push(rel);
  }
  return out;
}

function assetOf(rel: string[], body: Buffer): Asset | undefined {
  const name = rel[rel.length - 1] ?? "";
  const ext = name.includes(".") ? name.slice(name.lastIndexOf(".") + 1).toLowerCase() : "";
  const contentType = CONTENT_TYPES[ext];
  if (contentType === undefined) return undefined; // unknown kinds are not served: nosniff would make them useless anyway
  const gz = COMPRESSIBLE.has(ext) && body.length > 1024 ? gzipSync(body, { level: 9 }) : undefined;
  return {
    body,
    gzip: gz !== undefined && gz.length < body.length ? gz : undefined,
    contentType,
    cacheControl: rel[0] === "assets" && rel.length > 1 ? IMMUTABLE : REVALIDATE,
    etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 22)}"`,
    html: ext === "html",
  };
}

function acceptsGzip(header: string | undefined): boolean {
  if (!header) return false;
  return header.split(",").some((part) => {
    const [coding, ...params] = part.trim().toLowerCase().split(";");
    const q = params.map((p) => p.trim()).find((p) => p.startsWith("q="));
    return (coding === "gzip" || coding === "*") && (q === undefined || Number(q.slice(2)) > 0);
  });
}

function matchesEtag(header: string | undefined, etag: string): boolean {
  if (!header) return false;
  return header.trim() === "*" || header.split(",").some((t) => t.trim().replace(/^W\//, "") === etag);
}
