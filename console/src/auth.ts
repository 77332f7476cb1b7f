/**
 * The console's login: a token pasted into the login form, given as
 * `#token=…` in the URL fragment (never sent to a server; removed from the
 * address bar at once), or single sign-on: the gateway's sign-in comes back
 * with a one-time handoff code as `#sso=…` (removed at once too), redeemed
 * for the token. It is kept in sessionStorage only — gone when the tab
 * closes, never in a cookie, a URL the console requests, or a log.
 */
import "./zod-config.ts";
import { ErrorBody, fillPath, OidcDiscovery, PublicApi, SsoToken } from "@paddock/contracts";

const KEY = "paddock.token";

/** Takes a token from the fragment (`#token=…`, alone or before a route: `#token=…&/sessions`), leaving the route. */
export function adoptFragmentToken(): void {
  const m = /^#token=([^&]+)(?:&(.*))?$/.exec(location.hash);
  if (!m) return;
  sessionStorage.setItem(KEY, decodeURIComponent(m[1] ?? ""));
  history.replaceState(null, "", `${location.pathname}${location.search}#${m[2] ?? "/sessions"}`);
}

export function token(): string | undefined {
  return sessionStorage.getItem(KEY) ?? undefined;
}

export function login(value: string): void {
  sessionStorage.setItem(KEY, value.trim());
}

export function logout(): void {
  sessionStorage.removeItem(KEY);
}

/** Whether the gateway offers single sign-on to the console; undefined when it cannot say. */
export async function ssoOffered(): Promise<boolean> {
  try {
    const res = await fetch(PublicApi.oidcDiscovery.path, { credentials: "omit", cache: "no-store" });
    const d = OidcDiscovery.safeParse(res.ok ? await res.json() : undefined);
    return d.success && d.data.enabled && d.data.consoleLogin === true;
  } catch {
    return false;
  }
}

/** Where "Sign in with SSO" goes: the gateway's sign-in, which comes back to this page. */
export function ssoLoginUrl(workspaceId: string): string {
  const url = new URL(fillPath(PublicApi.oidcLogin.path, {}), location.origin);
  if (workspaceId.trim() !== "") url.searchParams.set("workspaceId", workspaceId.trim());
  url.searchParams.set("returnTo", location.pathname);
  return url.pathname + url.search;
}

/** Takes a handoff code from the fragment (`#sso=…`) and removes it from the address bar; undefined when there is none. */
export function takeFragmentHandoff(): string | undefined {
  const m = /^#sso=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (!m) return undefined;
  history.replaceState(null, "", `${location.pathname}${location.search}#/sessions`);
  return m[1];
}

/** Trades a handoff code for the person's token, kept as a pasted one; throws with the gateway's message. */
export async function redeemHandoff(handoff: string): Promise<void> {
  const res = await fetch(PublicApi.oidcRedeem.path, {
    method: PublicApi.oidcRedeem.method,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ handoff }),
    credentials: "omit",
    cache: "no-store",
  });
  const body: unknown = await res.json().catch(() => undefined);
  const ok = SsoToken.safeParse(body);
  if (res.ok && ok.success) return login(ok.data.token);
  const err = ErrorBody.safeParse((body as { error?: unknown } | undefined)?.error);
  throw new Error(err.success ? err.data.message : `the gateway answered ${res.status}`);
}
