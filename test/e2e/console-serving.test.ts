/**
 * The web console as the gateway serves it (issue 27): headers, caching, CSP,
 * 404s and traversal with plain HTTP, then the real page in Debian's Chromium
 * (test/e2e/browser.ts): the login form, a `#token=` login that never puts the
 * token in a URL, the shell's navigation, no page error and no CSP violation;
 * and raw xterm.js refused its inline styles under the gateway's strict CSP
 * (why the console's terminal mirrors them into constructed stylesheets:
 * decision 0055). Only the shell is asserted: the pages are their own tests.
 */
import { existsSync, readFileSync } from "node:fs";
import { request } from "node:http";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser, Page } from "playwright-core";
import type { Session } from "@paddock/contracts";
import { startStack, type Stack } from "@paddock/testing";
import { launchBrowser, screenshot, watchProblems } from "./browser.ts";
import { api } from "./helpers.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const NAV = ["Sessions", "Runners", "Environments", "Events", "Tokens"];

let stack: Stack;
let browser: Browser;

beforeAll(async () => {
  if (!existsSync(join(ROOT, "console/dist/index.html"))) throw new Error("the console is not built: npm run build:console (npm test builds it)");
  stack = await startStack();
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  await stack?.stop();
});

/** A request with its path sent exactly as written (fetch normalizes `..` away). */
function raw(method: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  const { hostname, port } = new URL(stack.url);
  return new Promise((ok, fail) => {
    const req = request({ host: hostname, port, method, path, headers }, (res) => {
      let body = "";
      res.setEncoding("latin1");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => ok({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", fail);
    req.end();
  });
}

const sessionIds = async () => ((await api(stack.url, stack.token, "GET", "/v1/sessions")).body as { sessions: Session[] }).sessions.map((s) => s.id).sort();

describe("the console over plain HTTP", () => {
  it("serves index.html (no-cache, strict CSP) and its hashed assets (immutable) with their types", async () => {
    const index = await fetch(`${stack.url}/`);
    expect(index.status).toBe(200);
    const csp = index.headers.get("content-security-policy") ?? "";
    expect(Object.fromEntries(["content-type", "cache-control", "x-content-type-options", "referrer-policy"].map((k) => [k, index.headers.get(k)]))).toEqual({
      "content-type": "text/html; charset=utf-8",
      "cache-control": "no-cache",
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
    });
    for (const d of ["default-src 'none'", "script-src 'self'", "connect-src 'self'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'", "img-src 'self' data:", "font-src 'self'"]) expect(csp).toContain(d);
    expect(csp).not.toMatch(/script-src[^;]*(unsafe|data:|\*)/);
    const html = await index.text();
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/); // no inline script
    const assets = [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1] ?? "");
    expect(assets.some((a) => a.endsWith(".js"))).toBe(true);
    for (const a of assets) {
      const r = await fetch(`${stack.url}${a}`);
      expect(r.status, a).toBe(200);
      expect(r.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
      expect(r.headers.get("content-type")).toBe(a.endsWith(".js") ? "text/javascript; charset=utf-8" : "text/css; charset=utf-8");
      expect(r.headers.get("x-content-type-options")).toBe("nosniff");
    }
    expect((await fetch(`${stack.url}/index.html`, { method: "HEAD" })).headers.get("content-security-policy")).toBe(csp);
  });

  it("answers 404 to deep links, unknown assets and every traversal; /v1 and the probes are unchanged", async () => {
    for (const path of ["/sessions", "/assets/x.js", "/assets/../../etc/passwd", "/assets/%2e%2e/%2e%2e/etc/passwd", "/assets/%00", "/assets/..%5c..%5cpackage.json", "/..%2f..%2fpackage.json", "/assets\\..\\index.html", "/../package.json"]) {
      const r = await raw("GET", path);
      expect(r.status, path).toBe(404);
      expect(r.body, path).not.toMatch(/root:x:0|"name": "paddock"/);
    }
    expect((await fetch(`${stack.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${stack.url}/readyz`)).status).toBe(200);
    expect((await fetch(`${stack.url}/v1/sessions`)).status).toBe(401);
  });

  it("refuses a state-changing call from a foreign origin and creates nothing; same-origin and no Origin pass", async () => {
    const before = await sessionIds();
    const body = JSON.stringify({ spec: { cmd: ["true"] }, oneShot: true });
    const post = (origin?: string) => fetch(`${stack.url}/v1/sessions`, { method: "POST", body, headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json", ...(origin ? { origin } : {}) } });
    const foreign = await post("https://evil.example");
    expect(foreign.status).toBe(403);
    expect(await foreign.json()).toEqual({ error: { code: "forbidden", message: "origin not allowed" } });
    expect(await sessionIds()).toEqual(before);
    expect((await fetch(`${stack.url}/v1/sessions`, { headers: { authorization: `Bearer ${stack.token}`, origin: "https://evil.example" } })).status).toBe(200);
    for (const origin of [stack.url, undefined]) {
      const ok = await post(origin);
      expect(ok.status).toBe(201);
      await api(stack.url, stack.token, "DELETE", `/v1/sessions/${((await ok.json()) as Session).id}`);
    }
  });
});

describe("the console in Chromium", () => {
  async function openPage(): Promise<{ page: Page; problems: Awaited<ReturnType<typeof watchProblems>>; urls: string[] }> {
    const page = await (await browser.newContext()).newPage();
    const problems = await watchProblems(page);
    const urls: string[] = [];
    page.on("request", (r) => urls.push(r.url()));
    return { page, problems, urls };
  }

  it("shows the login form, logs in from #token= without the token in any URL, and logs out", async () => {
    const first = await openPage();
    await first.page.goto(`${stack.url}/`);
    await first.page.locator("form.login #token").waitFor();
    expect(await first.page.getByLabel("API token").isVisible()).toBe(true);
    await screenshot(first.page, "login");
    // Pasted into the form.
    await first.page.getByLabel("API token").fill(stack.token);
    await first.page.getByRole("button", { name: "Log in" }).click();
    await first.page.getByRole("navigation", { name: "Main" }).waitFor();
    expect(first.problems.all()).toEqual([]);
    await first.page.context().close();

    const { page, problems, urls } = await openPage();
    await page.goto(`${stack.url}/#token=${encodeURIComponent(stack.token)}`);
    const nav = page.getByRole("navigation", { name: "Main" });
    await nav.waitFor();
    for (const name of NAV) expect(await nav.getByRole("link", { name }).isVisible(), name).toBe(true);
    expect(await nav.getByRole("button", { name: "Log out" }).isVisible()).toBe(true);
    await page.locator("nav").waitFor();
    expect(await page.evaluate("location.href")).not.toContain(stack.token);
    expect(await page.evaluate("sessionStorage.getItem('paddock.token')")).toBe(stack.token);
    expect(urls.length).toBeGreaterThan(0);
    expect(urls.filter((u) => u.includes(stack.token) || u.includes(encodeURIComponent(stack.token)))).toEqual([]);
    expect(problems.all()).toEqual([]);
    await screenshot(page, "shell");

    await nav.getByRole("button", { name: "Log out" }).click();
    await page.locator("form.login #token").waitFor();
    expect(await page.evaluate("sessionStorage.getItem('paddock.token')")).toBeNull();
    expect(problems.all()).toEqual([]);
    await page.context().close();
  });

  // xterm.js 6 writes its dimensions and colours into <style> elements and `style` attributes it creates.
  // Loaded as it is (without the console's shim) into the real page under the gateway's CSP, it is refused.
  const xtermDir = dirname(createRequire(join(ROOT, "console/package.json")).resolve("@xterm/xterm"));
  const PROBE = `
    import { Terminal } from "/__probe/xterm.mjs";
    const link = Object.assign(document.createElement("link"), { rel: "stylesheet", href: "/__probe/xterm.css" });
    document.head.append(link);
    await new Promise((r) => (link.onload = r));
    const el = document.createElement("div");
    el.style.width = "640px";
    document.body.append(el);
    const term = new Terminal({ cols: 60, rows: 6 });
    term.open(el);
    await new Promise((r) => term.write("plain \\x1b[31mred\\x1b[0m \\x1b[38;2;10;200;30mtruecolor\\x1b[0m\\r\\n", r));
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    const span = (text) => [...el.querySelectorAll(".xterm-rows span")].find((s) => s.textContent === text);
    const ws = new WebSocket("ws://" + location.host + "/v1/sessions/ses_probe/terminal");
    await new Promise((r) => { ws.onclose = r; ws.onerror = r; });
    window.__probe = { red: getComputedStyle(span("red")).color, truecolor: getComputedStyle(span("truecolor")).color };
  `;

  async function probeXterm(csp: (real: string) => string): Promise<{ colors: { red: string; truecolor: string }; csp: string[]; other: string[] }> {
    const { page, problems } = await openPage();
    await page.route(`${stack.url}/__probe/**`, (route) => {
      const name = new URL(route.request().url()).pathname.slice("/__probe/".length);
      const files: Record<string, [string, string]> = {
        "probe.mjs": ["text/javascript", PROBE],
        "xterm.mjs": ["text/javascript", readFileSync(join(xtermDir, "xterm.mjs"), "utf8")],
        "xterm.css": ["text/css", readFileSync(join(xtermDir, "../css/xterm.css"), "utf8")],
      };
      const file = files[name];
      return file ? route.fulfill({ status: 200, contentType: file[0], body: file[1] }) : route.fulfill({ status: 404 });
    });
    await page.route(`${stack.url}/`, async (route) => {
      const response = await route.fetch();
      const headers = response.headers();
      await route.fulfill({ response, headers: { ...headers, "content-security-policy": csp(headers["content-security-policy"] ?? "") } });
    });
    await page.goto(`${stack.url}/`);
    await page.evaluate(`document.head.append(Object.assign(document.createElement("script"), { type: "module", src: "/__probe/probe.mjs" }))`);
    // A function, not a string: Playwright would eval a string in the page, which its CSP refuses.
    await page.waitForFunction(() => (globalThis as { __probe?: unknown }).__probe !== undefined, undefined, { timeout: 10_000 });
    const colors = (await page.evaluate("window.__probe")) as { red: string; truecolor: string };
    await page.context().close();
    // The probe's socket to a session that does not exist fails by design (Chromium logs that), not by the CSP.
    const other = [...problems.console.filter((m) => !/WebSocket connection to|inline style|Failed to load resource/.test(m)), ...problems.pageErrors];
    // The console's own bundle is judged by the login test; here only what xterm.js does (its styles) counts.
    return { colors, csp: problems.csp.filter((v) => !v.startsWith("script-src blocked eval")), other };
  }

  it("raw xterm.js is refused its inline styles under the gateway's CSP: the reason console/src/terminal/csp.ts exists (decision 0055)", async () => {
    const served = await probeXterm((real) => real);
    expect(served.other).toEqual([]);
    // If this fails, xterm.js no longer writes inline styles: the console's shim (csp.ts) can go.
    expect(served.csp.some((v) => v.startsWith("style-src"))).toBe(true);
    expect(served.colors.truecolor).not.toBe("rgb(10, 200, 30)");
  });
});
