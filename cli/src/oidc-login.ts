import { spawn } from "node:child_process";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import * as client from "openid-client";
import { ApiError } from "./io.ts";

/*
 * The CLI's half of single sign-on (issue 28 item 8): the person signs in at
 * the provider as the CLI's public native client and the CLI ends up with an
 * ID token, which the gateway exchanges for a Paddock token. Two ways:
 * authorization code with PKCE on a loopback redirect (RFC 8252; state and
 * nonce checked here, by openid-client), or the device authorization grant
 * (RFC 8628) for a machine without a browser.
 */

/** How long the CLI waits for the person to finish signing in. */
export const LOGIN_WAIT_MS = 10 * 60_000;

export interface Provider {
  issuer: string;
  clientId: string;
  scopes: string;
}

/** What the flows tell the person; `url` is where to sign in. */
export interface LoginPrompt {
  browser(url: string): void;
  device(verificationUri: string, userCode: string, complete: string | undefined): void;
}

async function configOf(p: Provider): Promise<client.Configuration> {
  const insecure = new URL(p.issuer).protocol === "http:";
  try {
    return await client.discovery(new URL(p.issuer), p.clientId, undefined, client.None(), insecure ? { execute: [client.allowInsecureRequests] } : {});
  } catch (err) {
    throw new ApiError("unavailable", `the identity provider ${p.issuer} cannot be reached: ${messageOf(err)}`);
  }
}

/** Authorization code with PKCE on a loopback redirect: answers the ID token. */
export async function browserLogin(p: Provider, prompt: LoginPrompt, signal: AbortSignal): Promise<string> {
  const config = await configOf(p);
  const verifier = client.randomPKCECodeVerifier();
  const state = client.randomState();
  const nonce = client.randomNonce();
  const callback = await loopbackCallback(signal);
  try {
    const redirectUri = `http://127.0.0.1:${String(callback.port)}/callback`;
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri,
      scope: p.scopes,
      code_challenge: await client.calculatePKCECodeChallenge(verifier),
      code_challenge_method: "S256",
      state,
      nonce,
    });
    prompt.browser(url.href);
    const { url: answered, respond } = await callback.next;
    try {
      const tokens = await client.authorizationCodeGrant(config, new URL(answered, redirectUri), { pkceCodeVerifier: verifier, expectedState: state, expectedNonce: nonce, idTokenExpected: true });
      respond(200, "Signed in to Paddock. You can close this tab.");
      if (tokens.id_token === undefined) throw new ApiError("unauthenticated", "the identity provider answered no ID token");
      return tokens.id_token;
    } catch (err) {
      respond(400, "Sign-in failed; see the terminal.");
      throw refusal(err);
    }
  } finally {
    callback.close();
  }
}

/** The device authorization grant: answers the ID token once the person approved the code. */
export async function deviceLogin(p: Provider, prompt: LoginPrompt, signal: AbortSignal): Promise<string> {
  const config = await configOf(p);
  try {
    const started = await client.initiateDeviceAuthorization(config, { scope: p.scopes });
    prompt.device(started.verification_uri, started.user_code, started.verification_uri_complete);
    const tokens = await client.pollDeviceAuthorizationGrant(config, started, undefined, { signal });
    if (tokens.id_token === undefined) throw new ApiError("unauthenticated", "the identity provider answered no ID token");
    return tokens.id_token;
  } catch (err) {
    throw refusal(err);
  }
}

/** A one-request HTTP server on 127.0.0.1 (an ephemeral port) for the provider's redirect. */
async function loopbackCallback(signal: AbortSignal): Promise<{
  port: number;
  next: Promise<{ url: string; respond: (status: number, text: string) => void }>;
  close: () => void;
}> {
  let deliver: (v: { url: string; respond: (status: number, text: string) => void }) => void = () => undefined;
  let fail: (err: Error) => void = () => undefined;
  const next = new Promise<{ url: string; respond: (status: number, text: string) => void }>((resolve, reject) => {
    deliver = resolve;
    fail = reject;
  });
  let taken = false;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? "/").split("?")[0];
    if (taken || req.method !== "GET" || path !== "/callback") {
      res.writeHead(404).end();
      return;
    }
    taken = true;
    deliver({
      url: req.url ?? "/",
      respond: (status, text) => {
        res.writeHead(status, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" });
        res.end(`${text}\n`);
      },
    });
  });
  const onAbort = () => fail(new ApiError("unavailable", "sign-in was not finished in time"));
  signal.addEventListener("abort", onAbort, { once: true });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    next,
    close: () => {
      signal.removeEventListener("abort", onAbort);
      server.close();
      server.closeAllConnections();
    },
  };
}

/** Tries to open the URL in the person's browser; failing (no display, no opener) is fine: the URL is printed. */
export function openBrowser(url: string): void {
  const opener = process.platform === "darwin" ? "open" : process.platform === "win32" ? "explorer" : "xdg-open";
  try {
    const child = spawn(opener, [url], { stdio: "ignore", detached: true });
    child.on("error", () => undefined);
    child.unref();
  } catch {
    // no opener: the printed URL is enough
  }
}

function refusal(err: unknown): Error {
  if (err instanceof ApiError) return err;
  if (err instanceof client.AuthorizationResponseError || err instanceof client.ResponseBodyError) {
    return new ApiError("unauthenticated", `the identity provider refused the sign-in: ${err.error}`);
  }
  if (err instanceof Error && err.name === "AbortError") return new ApiError("unavailable", "sign-in was not finished in time");
  return new ApiError("unauthenticated", `the sign-in did not pass its checks: ${messageOf(err)}`);
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
