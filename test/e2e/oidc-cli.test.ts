/**
 * `paddock login` (issue 28 item 8) against a real OpenID Connect provider on
 * loopback and the real stack: the browser flow (authorization code with
 * PKCE on a loopback redirect) whose printed URL Chromium completes, and the
 * device flow whose printed code Chromium approves; each keeps the token
 * where later commands find it. Bad invocations are usage errors.
 */
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser, BrowserContext, Page } from "playwright-core";
import type { OidcProviderHandle, Stack } from "@paddock/testing";
import { expectUsageError, runCli, startCli } from "../../cli/src/testing/run-cli.ts";
import { launchBrowser } from "./browser.ts";
import { actorOf, signInAtProvider, startSsoStack } from "./oidc-helpers.ts";

let stack: Stack;
let idp: OidcProviderHandle;
let browser: Browser;
let home: string;
const contexts: BrowserContext[] = [];

beforeAll(async () => {
  ({ stack, idp } = await startSsoStack());
  browser = await launchBrowser();
  home = mkdtempSync(join(tmpdir(), "paddock-login-"));
});
afterAll(async () => {
  for (const c of contexts) await c.close().catch(() => undefined);
  await browser?.close();
  await stack?.stop();
  await idp?.stop();
  if (home) rmSync(home, { recursive: true, force: true });
});

async function newPage(): Promise<Page> {
  const context = await browser.newContext();
  contexts.push(context);
  return context.newPage();
}

/** A CLI environment with its own config dir and no token of its own. */
const envOf = (dir: string) => ({ PADDOCK_URL: stack.url, PADDOCK_CONFIG_DIR: join(home, dir) });

describe("paddock login", () => {
  it("--no-browser prints the provider's URL; Chromium signs in there, and later commands use the kept token", async () => {
    const env = envOf("browser");
    expect((await runCli(["ls"], env)).code).toBe(2);
    const run = startCli(["login", "--no-browser"], env);
    await run.stderr.waitFor("sign in at: http");
    const url = /sign in at: (\S+)/.exec(run.stderr.text())?.[1] ?? "";
    expect(new URL(url).origin).toBe(idp.issuer);
    expect(new URL(url).searchParams.get("redirect_uri")).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/callback$/);
    const page = await newPage();
    await page.goto(url);
    await signInAtProvider(page, "alice");
    await page.getByText("Signed in to Paddock").waitFor();
    expect(await run.code).toBe(0);
    expect(run.stdout.text()).toMatch(new RegExp(`^logged in as ${actorOf("alice")} in workspace default \\(until .+\\)\\n$`));
    expect(statSync(join(env.PADDOCK_CONFIG_DIR, "credentials.json")).mode & 0o777).toBe(0o600);
    const ls = await runCli(["token", "ls", "--json"], env);
    expect(ls.code).toBe(0);
    expect(JSON.parse(ls.stdout)).toEqual([expect.objectContaining({ label: "sso", actor: { id: actorOf("alice"), kind: "user" } })]);
    expect((await runCli(["ls"], env)).code).toBe(0);
  });

  it("--device prints a code; Chromium approves it at the provider, and the token is kept", async () => {
    const env = envOf("device");
    const run = startCli(["login", "--device", "--workspace", "team-b"], env);
    await run.stderr.waitFor("or open: http");
    const complete = /or open: (\S+)/.exec(run.stderr.text())?.[1] ?? "";
    expect(run.stderr.text()).toMatch(/enter the code \S+/);
    const page = await newPage();
    await page.goto(complete);
    await page.getByRole("button", { name: "Continue" }).click();
    await signInAtProvider(page, "bob");
    expect(await run.code).toBe(0);
    expect(run.stdout.text()).toMatch(new RegExp(`^logged in as ${actorOf("bob")} in workspace team-b `));
    expect((await runCli(["ls"], env)).code).toBe(0);
  });

  it("a non-member signs in at the provider but gets no token", async () => {
    const env = envOf("stranger");
    const run = startCli(["login", "--no-browser"], env);
    await run.stderr.waitFor("sign in at: http");
    const page = await newPage();
    await page.goto(/sign in at: (\S+)/.exec(run.stderr.text())?.[1] ?? "");
    await signInAtProvider(page, "nora");
    expect(await run.code).toBe(1);
    expect(run.stderr.text()).toMatch(/error: forbidden: .* is not a member of any workspace/);
    expect((await runCli(["ls"], env)).code).toBe(2);
  });

  it.each([
    [["login", "extra"], /paddock login: expected nothing, got "extra"/],
    [["login", "--workspace"], /--workspace needs a value/],
    [["login", "--workspace", "bad id!"], /--workspace: not a workspace id/],
    [["login", "--device", "--no-browser"], /--device never opens a browser/],
    [["login", "--nope"], /unknown flag --nope/],
  ])("%j is a usage error that asks nothing", async (argv, reason) => {
    await expectUsageError(argv, reason, envOf("usage"));
  });
});
