import { OidcCallbackQuery, OidcDiscovery, OidcExchangeBody, OidcLoginQuery, OidcRedeemBody, SsoToken } from "../oidc.ts";
import { httpRoute, json, jsonBody } from "./route.ts";

/**
 * Single sign-on (issue 28 item 8; docs/auth.md): routes without a bearer
 * token — they are how a person gets one. Any Authorization header is ignored.
 */
export const OidcRoutes = {
  oidcDiscovery: httpRoute({
    method: "GET",
    path: "/v1/auth/oidc",
    summary: "Whether single sign-on through an OpenID Connect provider is configured; the issuer, scopes and the CLI's client id when it is.",
    responses: [json(OidcDiscovery)],
    errors: ["invalid"],
  }),
  oidcLogin: httpRoute({
    method: "GET",
    path: "/v1/auth/oidc/login",
    summary: "Starts the console's sign-in: 303 to the provider (authorization code with PKCE, state and nonce). `returnTo` is a path of this origin.",
    query: OidcLoginQuery,
    responses: [{ kind: "empty", status: [303] }],
    errors: ["invalid", "not_found", "rate_limited"],
  }),
  oidcCallback: httpRoute({
    method: "GET",
    path: "/v1/auth/oidc/callback",
    summary: "The provider's redirect: the code is exchanged and checked, the person's membership too, then 303 to the console with a one-time handoff code in the fragment (`#sso=`). Errors are an HTML page for a browser.",
    query: OidcCallbackQuery,
    responses: [{ kind: "empty", status: [303] }],
    errors: ["invalid", "unauthenticated", "forbidden", "not_found"],
  }),
  oidcRedeem: httpRoute({
    method: "POST",
    path: "/v1/auth/oidc/redeem",
    summary: "Trades a handoff code (single use, 60 s) for the person's Paddock token.",
    body: jsonBody(OidcRedeemBody),
    responses: [json(SsoToken, [201])],
    errors: ["invalid", "unauthenticated", "forbidden", "not_found", "conflict"],
  }),
  oidcExchange: httpRoute({
    method: "POST",
    path: "/v1/auth/oidc/exchange",
    summary: "Trades an ID token issued to the CLI's client (signature, issuer, audience, expiry checked; single use) for the person's Paddock token in a workspace they are a member of.",
    body: jsonBody(OidcExchangeBody),
    responses: [json(SsoToken, [201])],
    errors: ["invalid", "unauthenticated", "forbidden", "not_found", "conflict"],
  }),
} as const;
