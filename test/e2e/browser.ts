/**
 * The browser harness of the web console's end-to-end tests (issue 27):
 * Debian's Chromium (`/usr/bin/chromium`, or `PADDOCK_CHROMIUM`) driven
 * headless through playwright-core, which never downloads a browser. The
 * flags keep Chromium off the network it would otherwise reach for at every
 * start (updates, sync, safe browsing), which this machine's closed network
 * refuses many times over.
 */
import { existsSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";

export const CHROMIUM = process.env.PADDOCK_CHROMIUM ?? "/usr/bin/chromium";
/** Where screenshots go, for a person to look at (bench-results/ is not committed). */
export const SCREENSHOT_DIR = resolve(import.meta.dirname, "../../bench-results/console");

export async function launchBrowser(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: apt-get install chromium (as .ci/run does), or set PADDOCK_CHROMIUM`);
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

/** What went wrong in a page: console errors and warnings, uncaught exceptions, CSP violations. */
export interface PageProblems {
  console: string[];
  pageErrors: string[];
  /** `securitypolicyviolation` events: `<directive> blocked <uri> (<sample>)`. */
  csp: string[];
  /** All of the above, one line each, for `expect(problems.all()).toEqual([])`. */
  all(): string[];
}

/** The page-side listener: reports every CSP violation through an exposed binding, as it happens. */
const CSP_LISTENER = `document.addEventListener("securitypolicyviolation", (e) => {
  window.__paddockCspViolation(e.effectiveDirective + " blocked " + (e.blockedURI || "inline") + " (" + (e.sample || "").slice(0, 80) + ")");
}, true);`;

/**
 * Starts recording a page's problems; call before its first `goto`. Errors a
 * test provokes on purpose (a 401 it asked for, say) can be filtered by the
 * caller from `console`.
 */
export async function watchProblems(page: Page): Promise<PageProblems> {
  const problems: PageProblems = {
    console: [],
    pageErrors: [],
    csp: [],
    all: () => [...problems.console.map((m) => `console: ${m}`), ...problems.pageErrors.map((m) => `page error: ${m}`), ...problems.csp.map((m) => `csp: ${m}`)],
  };
  page.on("console", (msg) => {
    // Chromium aborts requests in flight when the host's interfaces change — other test files create and remove
    // sandbox veths meanwhile. Not the page's doing (its calls retry or its feeds reconnect); anything else counts.
    if (msg.text().includes("net::ERR_NETWORK_CHANGED")) return;
    if (msg.type() === "error" || msg.type() === "warning") problems.console.push(`${msg.type()}: ${msg.text()}${msg.location().url ? ` (${msg.location().url})` : ""}`);
  });
  page.on("pageerror", (err) => problems.pageErrors.push(err.message));
  await page.exposeFunction("__paddockCspViolation", (line: string) => void problems.csp.push(line));
  // Init scripts are injected by the browser's debugging protocol, not by the page: the page's own CSP does not apply to them.
  await page.addInitScript({ content: CSP_LISTENER });
  return problems;
}

/** Writes a full-page PNG under bench-results/console/ and returns its path. */
export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const path = join(SCREENSHOT_DIR, `${name.replace(/[^\w.-]+/g, "-")}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}
