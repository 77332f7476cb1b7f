/**
 * The web console in a real browser (issue 27 item 5): Debian's Chromium,
 * headless, through playwright-core, against a real stack serving the built
 * console. Log in by the URL fragment, create a session from the form, type
 * into its terminal and see the output, a second page attached as viewer sees
 * the same bytes and cannot type, suspend and resume from the buttons, an
 * uploaded file appears in the file list, a dropped network reconnects from
 * the cursor without losing or repeating a byte, copy and paste through the
 * clipboard, runners, tokens and events pushed from another client's changes,
 * the keyboard alone (skip link, focus ring, navigation) and an axe-core audit
 * of every page — with no page error and no CSP violation anywhere. A
 * screenshot of each page goes to bench-results/console/.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser, BrowserContext, Page } from "playwright-core";
import type { Session } from "@paddock/contracts";
import { startStack, type Stack } from "@paddock/testing";
import { launchBrowser, screenshot, watchProblems, type PageProblems } from "./browser.ts";
import { api } from "./helpers.ts";

let stack: Stack;
let browser: Browser;
const contexts: BrowserContext[] = [];
const problems: PageProblems[] = [];

beforeAll(async () => {
  stack = await startStack();
  browser = await launchBrowser();
});
afterAll(async () => {
  for (const c of contexts) await c.close().catch(() => undefined);
  await browser?.close();
  await stack?.stop();
});

/** A logged-in page (the token in the fragment, as a script would), its problems recorded. */
async function open(route: string, init?: string, opts: { bypassCSP?: boolean } = {}): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, ...opts });
  contexts.push(context);
  const page = await context.newPage();
  problems.push(await watchProblems(page));
  if (init) await page.addInitScript({ content: init });
  await page.goto(`${stack.url}/#token=${encodeURIComponent(stack.token)}&${route}`);
  return page;
}


/*
 * Page-side conditions are functions Playwright calls in the page (a string
 * would be eval'd there, which the console's CSP refuses). The test's program
 * has no DOM types: they reach the page through this one narrow view.
 */
interface PageView {
  document: { querySelector(sel: string): { textContent: string | null; paddockTerminal?: { text(): string } } | null };
}
/** Everything the terminal holds (its whole buffer, scrollback included), from the console's test read-out. */
const terminalText = (page: Page) => page.evaluate(() => (globalThis as unknown as PageView).document.querySelector("[data-testid=terminal]")?.paddockTerminal?.text() ?? "");

async function untilTerminalHas(page: Page, text: string): Promise<void> {
  await page.waitForFunction((t) => ((globalThis as unknown as PageView).document.querySelector("[data-testid=terminal]")?.paddockTerminal?.text() ?? "").includes(t), text, { timeout: 20_000 });
}

async function untilText(page: Page, testid: string, pattern: RegExp): Promise<void> {
  await page.waitForFunction(([id, source]) => new RegExp(source, "i").test((globalThis as unknown as PageView).document.querySelector(`[data-testid=${id}]`)?.textContent ?? ""), [testid, pattern.source] as const, { timeout: 30_000 });
}

let sessionId = "";

/** An init script (outside the page's CSP) that keeps every WebSocket the page opens in `__sockets`. */
const TRACK_SOCKETS = `(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      window.__sockets.push(this);
    }
  };
})();`;

describe("the web console in Chromium", () => {
  it("logs in from the fragment, never putting the token in a URL, and lists sessions", async () => {
    const page = await open("/sessions");
    const urls: string[] = [];
    page.on("request", (r) => urls.push(r.url()));
    await page.getByTestId("sessions-table").waitFor();
    expect(page.url()).not.toContain(stack.token);
    expect(await page.evaluate(`sessionStorage.getItem("paddock.token")`)).toBe(stack.token);
    expect(urls.filter((u) => u.includes(stack.token))).toEqual([]);
    await screenshot(page, "sessions");
  });

  it("creates a session from the form and types into its terminal", async () => {
    const page = await open("/sessions");
    await page.getByTestId("create-command").fill("bash");
    await page.getByTestId("create-name").fill("console-e2e");
    await page.getByTestId("create-submit").click();
    // The new session appears in the list (pushed, no reload); its link opens its page.
    await page.getByTestId("session-row").filter({ hasText: "console-e2e" }).getByTestId("session-link").click();
    await page.waitForURL(/#\/sessions\/ses_/);
    sessionId = /#\/sessions\/([^/?&]+)/.exec(page.url())?.[1] ?? "";
    expect(sessionId).toMatch(/^ses_/);
    await page.getByTestId("terminal").waitFor();
    await untilText(page, "terminal-status", /connected/);
    await page.locator("[data-testid=terminal] .xterm").click();
    await page.keyboard.type("echo typed-$((6*7))\n");
    await untilTerminalHas(page, "typed-42");
    await screenshot(page, "session");
  });

  it("a second page as viewer sees the same bytes, cannot type, and says it is read-only", async () => {
    const controller = await open(`/sessions/${sessionId}`);
    await untilTerminalHas(controller, "typed-42");
    const viewer = await open(`/sessions/${sessionId}?mode=viewer`);
    await viewer.getByTestId("readonly-badge").waitFor();
    await untilTerminalHas(viewer, "typed-42");
    await viewer.locator("[data-testid=terminal] .xterm").click();
    await viewer.keyboard.type("echo from-viewer\n");
    await controller.locator("[data-testid=terminal] .xterm").click();
    await controller.keyboard.type("echo after-viewer-$((2+3))\n");
    await untilTerminalHas(viewer, "after-viewer-5");
    expect(await terminalText(viewer)).not.toContain("from-viewer");
    await screenshot(viewer, "session-viewer");
  });

  it("suspends and resumes from the buttons", async () => {
    const page = await open(`/sessions/${sessionId}`);
    await page.getByTestId("suspend").click();
    await untilText(page, "session-state", /suspended/);
    await page.getByTestId("resume").click();
    await untilText(page, "session-state", /running/);
  });

  it("an uploaded file appears in the file list", async () => {
    const page = await open(`/sessions/${sessionId}`);
    await page.getByTestId("file-upload").setInputFiles({ name: "uploaded.txt", mimeType: "text/plain", buffer: Buffer.from("hello from the browser\n") });
    await page.locator('[data-testid=file-row][data-path="uploaded.txt"]').waitFor({ timeout: 20_000 });
    const read = await fetch(`${stack.url}/v1/sessions/${sessionId}/files?path=uploaded.txt`, { headers: { authorization: `Bearer ${stack.token}` } });
    expect(await read.text()).toBe("hello from the browser\n");
    await screenshot(page, "session-files");
  });

  it("a dropped connection reconnects from the cursor: no byte lost, none repeated", async () => {
    // Keeps the page's sockets within reach, to drop them as a network would (Chromium's offline mode leaves open sockets alone).
    const page = await open(`/sessions/${sessionId}?mode=viewer`, TRACK_SOCKETS);
    await untilText(page, "terminal-status", /connected/);
    const controller = await open(`/sessions/${sessionId}`);
    await untilText(controller, "terminal-status", /connected/);
    await controller.locator("[data-testid=terminal] .xterm").click();
    // The end marker is computed by the shell, so the typed command line never matches it.
    await controller.keyboard.type("for i in $(seq 1 300); do echo line-$i-of-300; sleep 0.005; done; echo drop-$((6*7))-done\n");
    await untilTerminalHas(page, "line-50-of-300");
    const dropped = await page.evaluate(() => {
      const sockets = (globalThis as unknown as { __sockets: Array<{ close(code: number): void; readyState: number }> }).__sockets;
      const open = sockets.filter((ws) => ws.readyState === 1);
      for (const ws of open) ws.close(4999);
      return open.length;
    });
    expect(dropped).toBe(1);
    await untilText(page, "terminal-status", /reconnecting|connected/);
    await untilTerminalHas(page, "drop-42-done");
    const text = await terminalText(page);
    // Each line once as output (the typed command holds `line-$i`, never a number).
    for (let i = 1; i <= 300; i++) expect(text.split(`line-${i}-of-300\n`).length - 1, `line ${i}`).toBe(1);
  });

  it("renders true colour under the strict CSP (xterm's styles through the CSSOM)", async () => {
    const page = await open(`/sessions/${sessionId}`);
    await untilText(page, "terminal-status", /connected/);
    await page.locator("[data-testid=terminal] .xterm").click();
    await page.keyboard.type("printf '\\033[38;2;10;200;30mtrue%s\\033[0m\\n' colour\n");
    await untilTerminalHas(page, "truecolour");
    // The buffer has it before the DOM renderer draws it (on its next animation frame): wait for the drawn span.
    const color = await page.waitForFunction(
      () => {
        const doc = (globalThis as unknown as { document: { querySelectorAll(s: string): Iterable<{ textContent: string | null }> } }).document;
        const span = [...doc.querySelectorAll("[data-testid=terminal] .xterm-rows span")].find((el) => el.textContent === "truecolour");
        return span ? (globalThis as unknown as { getComputedStyle(el: unknown): { color: string } }).getComputedStyle(span).color : false;
      },
      undefined,
      { timeout: 20_000 },
    );
    expect(await color.jsonValue()).toBe("rgb(10, 200, 30)");
  });

  it("a second controller supersedes the first, which says so and stops typing; the window's size reaches the terminal", async () => {
    const first = await open(`/sessions/${sessionId}`);
    await untilText(first, "terminal-status", /connected/);
    const second = await open(`/sessions/${sessionId}`);
    await untilText(second, "terminal-status", /connected/);
    await first.getByTestId("superseded").waitFor({ state: "visible" });
    await first.locator("[data-testid=terminal] .xterm").click();
    await first.keyboard.type("echo from-superseded-$((3*3))\n");
    await second.locator("[data-testid=terminal] .xterm").click();
    // The size follows the page: a narrower window is fewer columns, and the PTY is told (stty reads it).
    const sizeOf = () =>
      second.evaluate(() => (globalThis as unknown as { document: { querySelector(s: string): { paddockTerminal?: { size(): { cols: number; rows: number } } } | null } }).document.querySelector("[data-testid=terminal]")?.paddockTerminal?.size());
    const wide = await sizeOf();
    await second.setViewportSize({ width: 700, height: 600 });
    await second.waitForFunction(
      (before) => ((globalThis as unknown as { document: { querySelector(s: string): { paddockTerminal?: { size(): { cols: number } } } | null } }).document.querySelector("[data-testid=terminal]")?.paddockTerminal?.size().cols ?? before) < before,
      wide?.cols ?? 0,
    );
    const cols = await sizeOf();
    await second.keyboard.type("echo size-$(stty size | tr ' ' x)-end\n");
    await untilTerminalHas(second, `size-${cols?.rows}x${cols?.cols}-end`);
    expect(await terminalText(second)).not.toContain("from-superseded-9");
    await screenshot(first, "session-superseded");
  });

  it("copies the terminal's selection with Ctrl+Shift+C and pastes the clipboard into the terminal", async () => {
    const page = await open(`/sessions/${sessionId}`);
    await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin: stack.url });
    await untilText(page, "terminal-status", /connected/);
    await page.locator("[data-testid=terminal] .xterm").click();
    await page.keyboard.type("echo copy-me-$((2*21))\n");
    await untilTerminalHas(page, "copy-me-42");
    // A triple click selects the row xterm drew the output on; the shortcut puts it on the clipboard.
    await page.locator("[data-testid=terminal] .xterm-rows > div", { hasText: /^copy-me-42\s*$/ }).click({ clickCount: 3, force: true });
    await page.keyboard.press("Control+Shift+C");
    const clipboard = () => page.evaluate(() => (globalThis as unknown as { navigator: { clipboard: { readText(): Promise<string> } } }).navigator.clipboard.readText());
    await page.waitForFunction(() => (globalThis as unknown as { navigator: { clipboard: { readText(): Promise<string> } } }).navigator.clipboard.readText().then((t) => t.trim() !== ""));
    expect((await clipboard()).trim()).toBe("copy-me-42");
    // Pasting: the browser's paste of the clipboard reaches the program as typed input.
    await page.evaluate(() => (globalThis as unknown as { navigator: { clipboard: { writeText(t: string): Promise<void> } } }).navigator.clipboard.writeText("echo pasted-$((6*7))"));
    await page.locator("[data-testid=terminal] .xterm").click();
    await page.keyboard.press("Control+Shift+V");
    await page.keyboard.press("Enter");
    await untilTerminalHas(page, "pasted-42");
  });

  it("runners, tokens and events are pushed: another client's changes show without a reload", async () => {
    const runnerId = ((await api(stack.url, stack.token, "GET", "/v1/runners")).body as { runners: Array<{ id: string }> }).runners[0]?.id ?? "";
    const runners = await open("/runners");
    const stateOf = (state: string) => runners.locator(`[data-testid=runner-row][data-id="${runnerId}"] [data-testid=state]`, { hasText: state });
    await stateOf("active").waitFor();
    expect((await api(stack.url, stack.token, "POST", `/v1/runners/${runnerId}/cordon`, {})).status).toBe(200);
    await stateOf("cordoned").waitFor();
    expect((await api(stack.url, stack.token, "POST", `/v1/runners/${runnerId}/uncordon`, {})).status).toBe(200);
    await stateOf("active").waitFor();

    const tokens = await open("/tokens");
    await tokens.getByTestId("tokens-table").waitFor();
    const minted = (await api(stack.url, stack.token, "POST", "/v1/tokens", { label: "pushed-token" })).body as { id: string };
    const row = tokens.locator(`[data-testid=token-row][data-id="${minted.id}"]`);
    await row.waitFor();
    expect(await row.textContent()).toContain("pushed-token");
    expect((await api(stack.url, stack.token, "DELETE", `/v1/tokens/${minted.id}`)).status).toBe(200);
    await row.waitFor({ state: "detached" });

    const events = await open("/events");
    await events.getByTestId("events-table").waitFor();
    const created = (await api(stack.url, stack.token, "POST", "/v1/environments", { name: "pushed-env" })).body as { id: string };
    await events.locator("[data-testid=event-row]", { hasText: created.id }).first().waitFor();
    await screenshot(events, "events-pushed");
  });

  it("works from the keyboard alone: a visible skip link first, a visible focus ring, the navigation by Tab and Enter", async () => {
    interface Focused {
      text: string;
      id: string;
      outline: string;
      left: number;
      hash: string;
    }
    const page = await open("/runners");
    await page.getByTestId("runners-table").waitFor();
    const focused = () =>
      page.evaluate((): Focused => {
        const g = globalThis as unknown as {
          document: { activeElement: { textContent: string | null; id: string; getBoundingClientRect(): { left: number } } | null };
          getComputedStyle(e: unknown): { outlineStyle: string; outlineWidth: string };
          location: { hash: string };
        };
        const el = g.document.activeElement;
        const style = el ? g.getComputedStyle(el) : undefined;
        return { text: el?.textContent?.trim() ?? "", id: el?.id ?? "", outline: `${style?.outlineStyle ?? ""} ${style?.outlineWidth ?? ""}`, left: el?.getBoundingClientRect().left ?? -1, hash: g.location.hash };
      });
    await page.keyboard.press("Tab");
    const skip = await focused();
    expect(skip).toMatchObject({ text: "Skip to content", hash: "#/runners" });
    expect(skip.left).toBeGreaterThanOrEqual(0);
    expect(skip.outline).toMatch(/^solid [1-9]/);
    await page.keyboard.press("Enter");
    expect(await focused()).toMatchObject({ id: "main", hash: "#/runners" });
    // Back from the content into the navigation (Log out, then the links), each stop with its ring.
    for (let i = 0; i < 12 && (await focused()).text !== "Tokens"; i++) {
      await page.keyboard.press("Shift+Tab");
      expect((await focused()).outline).toMatch(/^solid [1-9]/);
    }
    expect((await focused()).text).toBe("Tokens");
    await page.keyboard.press("Enter");
    await page.getByTestId("tokens-table").waitFor();
    expect((await focused()).hash).toBe("#/tokens");
  });

  it("every page passes an automated accessibility audit (axe-core, WCAG 2 A and AA)", async () => {
    const axe = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
    const found: string[] = [];
    for (const [route, testid] of [
      ["/sessions", "sessions-table"],
      [`/sessions/${sessionId}`, "terminal"],
      ["/runners", "runners-table"],
      ["/environments", "environments-table"],
      ["/events", "events-table"],
      ["/tokens", "tokens-table"],
    ] as const) {
      // Only this audit's pages let a script in past the CSP (axe-core's own), so the CSP checks elsewhere stand.
      const page = await open(route, undefined, { bypassCSP: true });
      await page.getByTestId(testid).waitFor();
      await page.addScriptTag({ content: axe });
      const violations = await page.evaluate(async () => {
        const run = (globalThis as unknown as { axe: { run(ctx: unknown, opts: unknown): Promise<{ violations: Array<{ id: string; impact: string; nodes: Array<{ target: string[] }> }> }> } }).axe;
        const r = await run.run((globalThis as unknown as { document: unknown }).document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } });
        return r.violations.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(" ")).slice(0, 3).join(", ")}`);
      });
      found.push(...violations.map((v) => `${route}: ${v}`));
    }
    expect(found.join("\n")).toBe("");
    // Six pages, each a full axe-core run: minutes of CPU on a loaded 2-core machine, not seconds.
  }, 180_000);

  it("the other pages render live, with no page error or CSP violation anywhere", async () => {
    for (const [route, testid] of [
      ["/runners", "runners-table"],
      ["/environments", "environments-table"],
      ["/events", "events-table"],
      ["/tokens", "tokens-table"],
    ] as const) {
      const page = await open(route);
      await page.getByTestId(testid).waitFor();
      await screenshot(page, route.slice(1));
    }
    const listed = (await api(stack.url, stack.token, "GET", "/v1/sessions")).body as { sessions: Session[] };
    expect(listed.sessions.some((s) => s.id === sessionId)).toBe(true);
    expect(problems.flatMap((p) => p.all()).join("\n")).toBe("");
  }, 120_000);
});
