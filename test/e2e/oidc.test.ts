/**
 * Single sign-on for people (issue 28 item 8) through a real OpenID Connect
 * provider on loopback (oidc-provider: discovery, JWKS, PKCE, its own login
 * and consent pages), the real stack and Chromium: the console signs in and
 * lists sessions; a non-member, a replayed or tampered state, a replayed
 * handoff, and ID tokens for another audience, expired, re-signed or spent
 * are refused with nothing minted; bad input on every route is a 400 that
 * changes nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { Buckets } from "@paddock/contracts";
import type { OidcProviderHandle, Stack } from "@paddock/testing";
import { launchBrowser, watchProblems } from "./browser.ts";
import { api } from "./helpers.ts";
import { ACCOUNTS, actorOf, keysOf, signInAtProvider, startSsoStack } from "./oidc-helpers.ts";

let stack: Stack;
let idp: OidcProviderHandle;
let browser: Browser;
let nc: NatsConnection;
const contexts: BrowserContext[] = [];

beforeAll(async () => {
  ({ stack, idp } = await startSsoStack());
  nc = await connect({ servers: stack.nats.url });
  browser = await launchBrowser();
});
afterAll(async () => {
  for (const c of contexts) await c.close().catch(() => undefined);
  await browser?.close();
  await nc?.drain();
  await stack?.stop();
  await idp?.stop();
});

async function newPage(): Promise<Page> {
  const context = await browser.newContext();
  contexts.push(context);
  return context.newPage();
}

interface PageView {
  sessionStorage: { getItem(k: string): string | null };
}
const storedToken = (page: Page) => page.evaluate(() => (globalThis as unknown as PageView).sessionStorage.getItem("paddock.token"));

/** The token index keys of an actor (any workspace): what a mint writes first. */
const tokensOf = async (actorId: string) => (await keysOf(nc, Buckets.tokens)).filter((k) => k.startsWith("id.") && k.split(".")[2] === actorId);

const post = (path: string, body: unknown) => api(stack.url, undefined, "POST", path, body);

describe("the console signs in through the provider", () => {
  let callbackUrl = "";
  let handoff = "";

  it("lands on the sessions page, lists sessions, and keeps no code in the address bar", async () => {
    const made = await api(stack.url, stack.token, "POST", "/v1/sessions", { name: "sso-visible", spec: { cmd: ["sh", "-c", "exec sleep 600"] } });
    expect(made.status).toBe(201);
    const page = await newPage();
    const problems = await watchProblems(page);
    // The gateway's redirect to the console carries the handoff code (the fragment); the callback its code and state.
    page.on("response", (res) => {
      if (!res.url().startsWith(`${stack.url}/v1/auth/oidc/callback`)) return;
      callbackUrl = res.url();
      handoff = /#sso=(.+)$/.exec(res.headers().location ?? "")?.[1] ?? "";
    });
    await page.goto(`${stack.url}/`);
    await page.getByRole("button", { name: "Sign in with SSO" }).click();
    await signInAtProvider(page, "alice");
    await page.waitForURL(`${stack.url}/#/sessions`);
    await page.getByText("sso-visible").first().waitFor();
    expect(page.url()).not.toContain("sso=");
    expect(handoff).toMatch(/^pdh_/);

    const token = await storedToken(page);
    expect(token).toMatch(/^pdk_/);
    const listed = await api(stack.url, token ?? "", "GET", "/v1/sessions");
    expect(listed.status).toBe(200);
    const mine = await api(stack.url, token ?? "", "GET", "/v1/tokens");
    const [info] = (mine.body as { tokens: Array<{ actor: { id: string }; workspaceId: string; label: string; createdAt: number; expiresAt: number }> }).tokens;
    expect(info).toMatchObject({ actor: { id: actorOf("alice"), kind: "user" }, workspaceId: "default", label: "sso" });
    expect((info?.expiresAt ?? 0) - (info?.createdAt ?? 0)).toBe(12 * 60 * 60_000);
    expect([...problems.pageErrors, ...problems.csp]).toEqual([]);
  });

  it("a replayed callback (its state spent) and a replayed handoff code mint nothing", async () => {
    const before = await tokensOf(actorOf("alice"));
    const replay = await fetch(callbackUrl, { headers: { accept: "text/html" } });
    expect(replay.status).toBe(401);
    expect(replay.headers.get("content-type")).toMatch(/^text\/html/);
    expect(await replay.text()).toContain("sign-in expired, was already used, or did not start here");
    const json = await api(stack.url, undefined, "GET", new URL(callbackUrl).pathname + new URL(callbackUrl).search);
    expect(json).toMatchObject({ status: 401, body: { error: { code: "unauthenticated" } } });
    expect(await post("/v1/auth/oidc/redeem", { handoff })).toMatchObject({ status: 401, body: { error: { code: "unauthenticated" } } });
    expect(await tokensOf(actorOf("alice"))).toEqual(before);
  });

  /** Starts a login as a browser would: the provider's URL, its state, and the cookie that binds the login to this browser. */
  async function startLogin(): Promise<{ auth: URL; state: string; cookie: string }> {
    const start = await fetch(`${stack.url}/v1/auth/oidc/login?returnTo=/`, { redirect: "manual" });
    expect(start.status).toBe(303);
    const auth = new URL(start.headers.get("location") ?? "");
    const cookie = (start.headers.get("set-cookie") ?? "").split(";")[0] ?? "";
    expect(start.headers.get("set-cookie")).toMatch(/^paddock_sso_[0-9a-f]{16}=[\w-]{43}; Path=\/v1\/auth\/oidc\/callback; Max-Age=600; HttpOnly; SameSite=Lax$/);
    return { auth, state: auth.searchParams.get("state") ?? "", cookie };
  }
  const callback = (query: string, cookie?: string) =>
    fetch(`${stack.url}/v1/auth/oidc/callback?${query}`, { redirect: "manual", headers: cookie ? { cookie } : {} }).then(async (r) => ({ status: r.status, body: (await r.json()) as unknown }));

  it("a tampered state, or a callback in another browser than the login's, is refused before the provider is asked", async () => {
    const { auth, state, cookie } = await startLogin();
    expect(auth.origin).toBe(idp.issuer);
    expect(auth.searchParams.get("code_challenge_method")).toBe("S256");
    expect(auth.searchParams.get("nonce")).toBeTruthy();
    const tampered = `${state.slice(0, -2)}${state.endsWith("AA") ? "BB" : "AA"}`;
    expect(await callback(`code=abc&state=${tampered}`, cookie)).toMatchObject({ status: 401, body: { error: { code: "unauthenticated" } } });
    // Login CSRF: the right state without the cookie of the browser that started it (and the state is spent).
    expect(await callback(`code=abc&state=${state}`)).toMatchObject({ status: 401, body: { error: { message: expect.stringMatching(/did not start here/) as unknown } } });
    expect(await callback(`code=abc&state=${state}`, cookie)).toMatchObject({ status: 401 });
  });

  it("the provider's error is refused, and spends the login", async () => {
    const { state, cookie } = await startLogin();
    // With `iss` (RFC 9207, which this provider sends): without it the answer would be refused as not the provider's.
    const denied = await callback(`error=access_denied&state=${state}&iss=${encodeURIComponent(idp.issuer)}`, cookie);
    expect(denied).toMatchObject({ status: 401, body: { error: { message: "sign-in refused: the identity provider answered access_denied" } } });
    expect((await callback(`code=abc&state=${state}`, cookie)).status).toBe(401);
  });

  it("a person the provider knows who is no member is refused, and nothing is minted", async () => {
    const page = await newPage();
    await page.goto(`${stack.url}/`);
    await page.getByRole("button", { name: "Sign in with SSO" }).click();
    await signInAtProvider(page, "nora");
    await page.getByText("is not a member of any workspace").waitFor();
    expect(page.url()).toContain("/v1/auth/oidc/callback");
    expect(await tokensOf(actorOf("nora"))).toEqual([]);
  });

  it("a member of several workspaces chooses one; the one they name must be theirs", async () => {
    const page = await newPage();
    await page.goto(`${stack.url}/`);
    await page.locator("#sso-workspace").fill("team-b");
    await page.getByRole("button", { name: "Sign in with SSO" }).click();
    await signInAtProvider(page, "bob");
    await page.waitForURL(`${stack.url}/#/sessions`);
    // The address bar loses the handoff before its redeem answers: the token is kept once it has.
    await page.waitForFunction(() => (globalThis as unknown as PageView).sessionStorage.getItem("paddock.token") !== null);
    const token = await storedToken(page);
    const mine = await api(stack.url, token ?? "", "GET", "/v1/tokens");
    expect((mine.body as { tokens: Array<{ workspaceId: string }> }).tokens.map((t) => t.workspaceId)).toEqual(["team-b"]);
  });
});

describe("ID tokens the CLI exchanges", () => {
  const claims = (account: keyof typeof ACCOUNTS) => ({ sub: account, ...ACCOUNTS[account] });

  it("one issued to the CLI mints once; another audience, an expired one, a re-signed one and a spent one mint nothing", async () => {
    const good = idp.signIdToken(claims("alice"));
    const now = Math.floor(Date.now() / 1000);
    const refused = [
      idp.signIdToken({ ...claims("alice"), aud: idp.webClientId }),
      idp.signIdToken({ ...claims("alice"), aud: [idp.cliClientId, "other"], azp: "other" }),
      idp.signIdToken({ ...claims("alice"), iat: now - 7200, exp: now - 3600 }),
      idp.signIdToken({ ...claims("alice"), iss: "http://127.0.0.1:1" }),
      `${good.split(".").slice(0, 2).join(".")}.${Buffer.from("forged").toString("base64url")}`,
    ];
    const before = await tokensOf(actorOf("alice"));
    for (const idToken of refused) {
      expect(await post("/v1/auth/oidc/exchange", { idToken }), idToken.slice(-12)).toMatchObject({ status: 401, body: { error: { code: "unauthenticated" } } });
    }
    expect(await tokensOf(actorOf("alice"))).toEqual(before);
    const minted = await post("/v1/auth/oidc/exchange", { idToken: good });
    expect(minted).toMatchObject({ status: 201, body: { workspaceId: "default", actor: { id: actorOf("alice") } } });
    expect((await api(stack.url, (minted.body as { token: string }).token, "GET", "/v1/sessions")).status).toBe(200);
    expect(await post("/v1/auth/oidc/exchange", { idToken: good })).toMatchObject({ status: 401, body: { error: { message: "sign-in refused: this ID token was already exchanged" } } });
  });

  it("an unverified email, a non-member and a workspace not theirs are forbidden", async () => {
    expect(await post("/v1/auth/oidc/exchange", { idToken: idp.signIdToken(claims("eve")) })).toMatchObject({ status: 403, body: { error: { message: "the identity provider has not verified this email address" } } });
    expect(await post("/v1/auth/oidc/exchange", { idToken: idp.signIdToken(claims("nora")) })).toMatchObject({ status: 403 });
    expect(await post("/v1/auth/oidc/exchange", { idToken: idp.signIdToken(claims("alice")), workspaceId: "team-b" })).toMatchObject({ status: 403 });
    expect(await post("/v1/auth/oidc/exchange", { idToken: idp.signIdToken(claims("bob")) })).toMatchObject({ status: 400, body: { error: { message: expect.stringMatching(/several workspaces/) as unknown } } });
    expect(await tokensOf(actorOf("nora"))).toEqual([]);
    expect(await tokensOf(actorOf("eve"))).toEqual([]);
  });
});

describe("bad input on every single sign-on route", () => {
  it("is a 400 typed error that changes nothing", async () => {
    const snapshot = async () => [await keysOf(nc, Buckets.oidc), await keysOf(nc, Buckets.tokens)];
    const before = await snapshot();
    const cases: Array<[string, string, unknown?, string?]> = [
      ["GET", "/v1/auth/oidc?x=1"],
      ["GET", "/v1/auth/oidc/login?returnTo=//evil.example/"],
      ["GET", "/v1/auth/oidc/login?returnTo=https://evil.example/"],
      ["GET", "/v1/auth/oidc/login?returnTo=/%5Cevil"],
      ["GET", "/v1/auth/oidc/login?workspaceId=bad%20id!"],
      ["GET", "/v1/auth/oidc/login?returnTo=/&returnTo=/"],
      ["GET", "/v1/auth/oidc/callback?code=a&state=b&zz=1"],
      ["POST", "/v1/auth/oidc/redeem", {}],
      ["POST", "/v1/auth/oidc/redeem", { handoff: "pdk_notahandoff" }],
      ["POST", "/v1/auth/oidc/redeem", undefined, "{not json"],
      ["POST", "/v1/auth/oidc/exchange", { idToken: "not a jwt" }],
      ["POST", "/v1/auth/oidc/exchange", { idToken: idp.signIdToken({ sub: "alice", ...ACCOUNTS.alice }), workspaceId: "bad id!" }],
      ["POST", "/v1/auth/oidc/exchange", { idToken: "a.b.c", extra: true }],
    ];
    for (const [method, path, body, raw] of cases) {
      const res = await api(stack.url, undefined, method, path, body, raw);
      expect(res, `${method} ${path}`).toMatchObject({ status: 400, body: { error: { code: "invalid" } } });
    }
    expect(await snapshot()).toEqual(before);
  });

  it("GET /v1/auth/oidc says what the CLI needs, with no token", async () => {
    expect(await api(stack.url, undefined, "GET", "/v1/auth/oidc")).toEqual({
      status: 200,
      body: { enabled: true, issuer: idp.issuer, consoleLogin: true, cliClientId: idp.cliClientId, scopes: "openid email profile" },
    });
  });
});
