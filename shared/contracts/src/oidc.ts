import { z } from "zod";
import { Actor } from "./auth.ts";
import { EpochMs, Id } from "./ids.ts";
import { TokenValue } from "./tokens.ts";

/*
 * Single sign-on for people through an OpenID Connect provider (issue 28
 * item 8, docs/auth.md): the gateway is the relying party of the console's
 * web client and checks ID tokens the CLI's native client obtained; either
 * way the person's Paddock token is minted for a workspace they are a member of.
 */

/** Lifetime of a one-time handoff code (the console redeems it at once). */
export const SSO_HANDOFF_TTL_MS = 60_000;
/** Prefix of a handoff code: 32 random bytes (base64url) follow. */
export const HANDOFF_PREFIX = "pdh_";
export const HandoffCode = z.string().regex(new RegExp(`^${HANDOFF_PREFIX}[A-Za-z0-9_-]{43}$`), "not a handoff code");

/** A same-origin path to land on after signing in: one leading `/`, no scheme, host, backslash, fragment or control character. */
export const ReturnToPath = z
  .string()
  .max(512)
  .regex(/^\/(?![/\\])[^\\#\s\u0000-\u001f\u007f]*$/, "must be a path of this origin (/…)");

/** Answer of GET /v1/auth/oidc: whether sign-on is configured, and what the CLI needs to run its own flow. */
export const OidcDiscovery = z
  .object({
    enabled: z.boolean(),
    issuer: z.string().optional(),
    /** The console can sign in through the gateway (a web client is configured). */
    consoleLogin: z.boolean().optional(),
    /** The native client the CLI signs in as (authorization code with PKCE on loopback, or the device grant). */
    cliClientId: z.string().optional(),
    scopes: z.string().optional(),
  })
  .strict();
export type OidcDiscovery = z.infer<typeof OidcDiscovery>;

/** Query of GET /v1/auth/oidc/login. */
export const OidcLoginQuery = z.object({ workspaceId: Id.optional(), returnTo: ReturnToPath.default("/") }).strict();

/** An OAuth error code the provider may answer (RFC 6749 §4.1.2.1): echoed only when it is this shape. */
const OAuthParam = z.string().max(2048);

/**
 * Query of GET /v1/auth/oidc/callback: the authorization response. The
 * parameters providers are known to add (RFC 9207 `iss`, `session_state`,
 * Google's `scope`/`authuser`/`hd`/`prompt`) are allowed; anything else is invalid.
 */
export const OidcCallbackQuery = z
  .object({
    code: OAuthParam.optional(),
    state: OAuthParam.optional(),
    iss: OAuthParam.optional(),
    error: OAuthParam.optional(),
    error_description: OAuthParam.optional(),
    error_uri: OAuthParam.optional(),
    session_state: OAuthParam.optional(),
    scope: OAuthParam.optional(),
    authuser: OAuthParam.optional(),
    hd: OAuthParam.optional(),
    prompt: OAuthParam.optional(),
  })
  .strict();

/** Body of POST /v1/auth/oidc/redeem. */
export const OidcRedeemBody = z.object({ handoff: HandoffCode }).strict();

/** Body of POST /v1/auth/oidc/exchange: an ID token issued to the CLI's client id. */
export const OidcExchangeBody = z
  .object({
    idToken: z.string().min(1).max(16_384).regex(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/, "not a compact JWS"),
    workspaceId: Id.optional(),
  })
  .strict();

/** Answer of redeem and exchange: the person's Paddock token, shown this once. */
export const SsoToken = z.object({ token: TokenValue, id: Id, workspaceId: Id, actor: Actor, expiresAt: EpochMs }).strict();
export type SsoToken = z.infer<typeof SsoToken>;

/**
 * The Paddock actor id of a claim's value. Actor ids are `[A-Za-z0-9_-]{1,64}`
 * (they are KV keys); a value with anything else (an email's `@` and `.`) is
 * escaped byte by byte as `_xx` (lowercase hex of its UTF-8), `_` itself
 * included, so two values never share an id: `alice@example.com` →
 * `alice_40example_2ecom`. Undefined when the result is longer than 64.
 */
export function actorIdOfClaim(value: string): string | undefined {
  let out = "";
  for (const byte of new TextEncoder().encode(value)) {
    const c = String.fromCharCode(byte);
    out += /[A-Za-z0-9-]/.test(c) ? c : `_${byte.toString(16).padStart(2, "0")}`;
  }
  return out.length >= 1 && out.length <= 64 ? out : undefined;
}
