import { request } from "node:http";
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { startHarness, TOKENS, useHarness } from "../testing/testkit.ts";
import { CONSOLE_CSP } from "./console-assets.ts";

/** A console build as Vite lays it out, plus what must never be served: a symlink out, a dotfile, a file beside the directory. */
function fixtureDir(): string {
  const parent = mkdtempSync(join(tmpdir(), "paddock-console-"));
  writeFileSync(join(parent, "secret.txt"), "outside the console\n");
  const dir = join(parent, "dist");
  mkdirSync(join(dir, "assets"), { recursive: true });
  writeFileSync(join(dir, "index.html"), `<!doctype html><script type="module" src="/assets/index-AbC123.js"></script>\n`);
  writeFileSync(join(dir, "assets", "index-AbC123.js"), `console.log(${JSON.stringify("x".repeat(4000))});\n`);
  writeFileSync(join(dir, "assets", "index-AbC123.css"), "body{color:red}\n");
  writeFileSync(join(dir, "assets", "logo-9z.svg"), "<svg xmlns='http://www.w3.org/2000/svg'/>");
  writeFileSync(join(dir, "assets", "font-1.woff2"), Buffer.from([0x77, 0x4f, 0x46, 0x32]));
  writeFileSync(join(dir, "favicon.ico"), Buffer.from([0, 0, 1, 0]));
  writeFileSync(join(dir, ".env"), "SECRET=1\n");
  symlinkSync("/etc/passwd", join(dir, "assets", "passwd.js"));
  symlinkSync(join(parent, "secret.txt"), join(dir, "secret.txt"));
  return dir;
}

interface Raw {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** A request with the path sent exactly as written (fetch would normalize `..` away before sending). */
function raw(base: string, method: string, path: string, headers: Record<string, string> = {}): Promise<Raw> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, method, path, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on("error", reject);
    req.end();
  });
}

const h = useHarness({ config: { consoleDir: fixtureDir() } });

describe("the console at /", () => {
  it("serves index.html at / and /index.html, never cached, with the CSP, nosniff and no referrer", async () => {
    for (const path of ["/", "/index.html", "/?x=1"]) {
      const r = await raw(h.url, "GET", path);
      expect(r.status).toBe(200);
      expect(r.body.toString()).toContain("/assets/index-AbC123.js");
      expect(r.headers).toMatchObject({
        "content-type": "text/html; charset=utf-8",
        "cache-control": "no-cache",
        "content-security-policy": CONSOLE_CSP,
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
      });
    }
    expect(CONSOLE_CSP).toContain("script-src 'self'");
    expect(CONSOLE_CSP).toContain("frame-ancestors 'none'");
    expect(CONSOLE_CSP).not.toMatch(/script-src[^;]*unsafe/);
  });

  it("serves hashed assets with a year's immutable caching and the type of each extension", async () => {
    for (const [path, type] of [
      ["/assets/index-AbC123.js", "text/javascript; charset=utf-8"],
      ["/assets/index-AbC123.css", "text/css; charset=utf-8"],
      ["/assets/logo-9z.svg", "image/svg+xml"],
      ["/assets/font-1.woff2", "font/woff2"],
    ] as const) {
      const r = await raw(h.url, "GET", path);
      expect(r.status, path).toBe(200);
      expect(r.headers).toMatchObject({ "content-type": type, "cache-control": "public, max-age=31536000, immutable", "x-content-type-options": "nosniff" });
      expect(r.headers["content-security-policy"]).toBeUndefined();
    }
    const ico = await raw(h.url, "GET", "/favicon.ico");
    expect(ico.headers).toMatchObject({ "content-type": "image/x-icon", "cache-control": "no-cache" });
  });

  it("answers HEAD with the headers and no body, gzip to who asks, 304 on a matching ETag", async () => {
    const head = await raw(h.url, "HEAD", "/assets/index-AbC123.js");
    expect(head.status).toBe(200);
    expect(head.body.length).toBe(0);
    expect(Number(head.headers["content-length"])).toBeGreaterThan(4000);
    const gz = await raw(h.url, "GET", "/assets/index-AbC123.js", { "accept-encoding": "gzip, br" });
    expect(gz.headers["content-encoding"]).toBe("gzip");
    expect(gunzipSync(gz.body).toString()).toContain("console.log(");
    const etag = String((await raw(h.url, "HEAD", "/")).headers.etag);
    expect(etag).toMatch(/^"[\w-]+"$/);
    const again = await raw(h.url, "GET", "/", { "if-none-match": etag });
    expect(again.status).toBe(304);
    expect(again.body.length).toBe(0);
  });

  it("refuses traversal, escapes, symlinks, dotfiles and deep links: 404, nothing of the file", async () => {
    for (const path of [
      "/assets/../../etc/passwd",
      "/assets/../index.html",
      "/assets/%2e%2e/%2e%2e/etc/passwd",
      "/assets/%2E%2E%2Findex.html",
      "/assets/index-AbC123.js%00.png",
      "/assets/..%5c..%5cetc%5cpasswd",
      "/assets\\..\\index.html",
      "//etc/passwd",
      "/assets/passwd.js",
      "/secret.txt",
      "/.env",
      "/assets/",
      "/assets",
      "/sessions",
      "/sessions/ses_1",
      "/index.html/",
      "/ASSETS/index-AbC123.js",
    ]) {
      const r = await raw(h.url, "GET", path);
      expect(r.status, path).toBe(404);
      expect(r.body.toString(), path).not.toMatch(/root:|outside the console|SECRET/);
    }
  });

  it("serves nothing but GET and HEAD; /v1, /healthz and /readyz are unchanged", async () => {
    expect((await raw(h.url, "POST", "/")).status).toBe(404);
    expect((await raw(h.url, "DELETE", "/index.html")).status).toBe(404);
    expect((await raw(h.url, "GET", "/healthz")).status).toBe(200);
    expect((await raw(h.url, "GET", "/readyz")).status).toBe(200);
    expect((await raw(h.url, "GET", "/v1/sessions", { authorization: `Bearer ${TOKENS.alice}` })).status).toBe(200);
    expect((await raw(h.url, "GET", "/v1/sessions")).status).toBe(401);
    expect((await raw(h.url, "GET", "/v1/nothing")).status).toBe(404);
  });
});

describe("without a console build", () => {
  it("answers / with a 503 page saying how to build it; the API still works", async () => {
    const missing = await startHarness({ config: { consoleDir: join(tmpdir(), "paddock-no-console-here") } });
    try {
      for (const path of ["/", "/index.html"]) {
        const r = await raw(missing.url, "GET", path);
        expect(r.status).toBe(503);
        expect(r.headers["content-type"]).toBe("text/html; charset=utf-8");
        expect(r.body.toString()).toContain("npm run build:console");
      }
      expect((await raw(missing.url, "GET", "/assets/index-AbC123.js")).status).toBe(404);
      expect((await raw(missing.url, "GET", "/v1/sessions", { authorization: `Bearer ${TOKENS.alice}` })).status).toBe(200);
    } finally {
      await missing.stop();
    }
  });
});
