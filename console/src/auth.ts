/**
 * The console's login: a token pasted into the login form, or given as
 * `#token=…` in the URL fragment (never sent to a server; removed from the
 * address bar at once). It is kept in sessionStorage only — gone when the tab
 * closes, never in a cookie, a URL the console requests, or a log.
 */
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
