/**
 * The web console (issue 27): a static page the gateway serves at `/`. It
 * logs in with a token (pasted, or `#token=…`), then routes by the URL
 * fragment to one page per resource; every page keeps itself current from
 * the API's streams (no manual refresh).
 */
// First: zod must not probe `new Function` (the CSP forbids eval) when the contracts build their schemas.
import "./zod-config.ts";
import "@xterm/xterm/css/xterm.css";
import { adoptFragmentToken, login, logout, redeemHandoff, ssoLoginUrl, ssoOffered, takeFragmentHandoff, token } from "./auth.ts";
import { h, replace } from "./dom.ts";
import { Router } from "./router.ts";
import { environmentsPage } from "./pages/environments.ts";
import { eventsPage } from "./pages/events.ts";
import { runnersPage } from "./pages/runners.ts";
import { sessionPage } from "./pages/session.ts";
import { sessionsPage } from "./pages/sessions.ts";
import { tokensPage } from "./pages/tokens.ts";

const NAV = [
  ["#/sessions", "Sessions"],
  ["#/runners", "Runners"],
  ["#/environments", "Environments"],
  ["#/events", "Events"],
  ["#/tokens", "Tokens"],
] as const;

/** "Sign in with SSO", when the gateway offers it: to the gateway's sign-in, with a workspace when one is named. */
function ssoSection(): HTMLElement {
  const ws = h("input", { id: "sso-workspace", type: "text", autocomplete: "off", "aria-describedby": "sso-help" });
  return h(
    "div",
    { class: "sso" },
    h("label", { for: "sso-workspace" }, "Workspace (optional)"),
    ws,
    h("p", { id: "sso-help", class: "hint" }, "Needed only if you are a member of several."),
    h("button", { type: "button", onclick: () => location.assign(ssoLoginUrl(ws.value)) }, "Sign in with SSO"),
  );
}

function loginForm(app: HTMLElement, failure?: string): void {
  const input = h("input", { id: "token", type: "password", autocomplete: "off", required: true, "aria-describedby": "token-help" });
  const form = h(
    "form",
    {
      class: "login",
      "aria-label": "Log in",
      onsubmit: (ev) => {
        ev.preventDefault();
        login(input.value);
        boot(app);
      },
    },
    h("h1", {}, "Paddock"),
    failure !== undefined && h("p", { class: "error", role: "alert" }, `Sign-in failed: ${failure}`),
    h("label", { for: "token" }, "API token"),
    input,
    h("p", { id: "token-help", class: "hint" }, "Kept in this tab only (sessionStorage); never sent in a URL."),
    h("button", { type: "submit" }, "Log in"),
  );
  replace(app, form);
  input.focus();
  void ssoOffered().then((offered) => offered && form.isConnected && form.append(ssoSection()));
}

function shell(app: HTMLElement): HTMLElement {
  const main = h("main", { id: "main", tabindex: -1 });
  const links = NAV.map(([href, label]) => h("a", { href, "data-nav": href }, label));
  const nav = h(
    "nav",
    { "aria-label": "Main" },
    h("span", { class: "brand" }, "Paddock"),
    ...links,
    h("button", { type: "button", class: "logout", onclick: () => (logout(), boot(app)) }, "Log out"),
  );
  const mark = () => {
    for (const a of links) {
      const current = location.hash.startsWith(a.getAttribute("data-nav") ?? "");
      if (current) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
  };
  window.addEventListener("hashchange", mark);
  mark();
  // The console routes by fragment: the skip link moves focus without touching the hash.
  const skip = h("a", { href: "#main", class: "skip", onclick: (ev: Event) => (ev.preventDefault(), main.focus()) }, "Skip to content");
  replace(app, skip, nav, main);
  return main;
}

function boot(app: HTMLElement): void {
  if (!token()) return loginForm(app);
  const main = shell(app);
  const router = new Router(main, (root) => void replace(root, h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/sessions" }, "Back to sessions"))));
  router
    .add("/sessions", sessionsPage)
    .add("/sessions/:id", sessionPage)
    .add("/runners", runnersPage)
    .add("/environments", environmentsPage)
    .add("/events", eventsPage)
    .add("/tokens", tokensPage)
    .start();
}

adoptFragmentToken();
const app = document.getElementById("app");
const handoff = takeFragmentHandoff();
if (app && handoff !== undefined) {
  redeemHandoff(handoff).then(
    () => boot(app),
    (err: unknown) => loginForm(app, err instanceof Error ? err.message : String(err)),
  );
} else if (app) boot(app);
