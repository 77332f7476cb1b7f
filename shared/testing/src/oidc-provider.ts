/**
 * A real, standards-compliant OpenID Connect provider on loopback for tests
 * (`oidc-provider`, the certified Node implementation), not a mock: discovery,
 * JWKS, authorization code with PKCE (required for every client), the device
 * authorization grant, ID tokens signed with its own RSA key, and its built-in
 * development login and consent pages (any password; the login names the
 * account). Two clients: a confidential web client (the console's, through
 * the gateway) and a public native one (the CLI's: loopback redirects on any
 * port, RFC 8252, and the device grant).
 *
 * The provider is built on its first request, so a test can start it (the
 * issuer URL is known at once), start a stack pointing at it, and then name
 * the gateway's callback as the web client's redirect URI.
 */
import { createSign, generateKeyPairSync, randomBytes, type KeyObject } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type Provider from "oidc-provider";

export const OIDC_WEB_CLIENT_ID = "paddock-console";
export const OIDC_CLI_CLIENT_ID = "paddock-cli";

/** Claims of one account (besides `sub`, which is its login). */
export type OidcAccountClaims = Record<string, unknown>;

export interface OidcProviderHandle {
  /** `http://127.0.0.1:<port>`: PADDOCK_OIDC_ISSUER. */
  issuer: string;
  webClientId: string;
  webClientSecret: string;
  cliClientId: string;
  /** Registers the web client's redirect URI (the gateway's callback); call before the provider's first request. */
  allowWebRedirect(uri: string): void;
  /**
   * An ID token signed with the provider's own key (the one its JWKS
   * publishes): `claims` override the defaults (iss, aud = the CLI client,
   * iat now, exp in 10 minutes, a fresh jti: two tokens are never the same). For tokens a real flow would not give: another
   * audience, an expired one.
   */
  signIdToken(claims: Record<string, unknown>): string;
  stop(): Promise<void>;
}

export async function startOidcProvider(opts: { accounts: Record<string, OidcAccountClaims> }): Promise<OidcProviderHandle> {
  // Loaded here, not at the top: every user of @paddock/testing would pay for it (and see its warnings).
  const { default: ProviderClass } = await import("oidc-provider");
  const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const kid = randomBytes(8).toString("hex");
  const webClientSecret = randomBytes(24).toString("base64url");
  const webRedirects: string[] = [];
  let handler: ReturnType<Provider["callback"]> | undefined;
  let issuer = "";
  const server: Server = createServer((req, res) => {
    handler ??= buildProvider(ProviderClass, issuer, { accounts: opts.accounts, privateKey, kid, webClientSecret, webRedirects }).callback();
    handler(req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  issuer = `http://127.0.0.1:${String((server.address() as AddressInfo).port)}`;
  return {
    issuer,
    webClientId: OIDC_WEB_CLIENT_ID,
    webClientSecret,
    cliClientId: OIDC_CLI_CLIENT_ID,
    allowWebRedirect: (uri) => {
      if (handler) throw new Error("allowWebRedirect: the provider has already answered a request");
      webRedirects.push(uri);
    },
    signIdToken: (claims) => {
      const now = Math.floor(Date.now() / 1000);
      return signJwt(privateKey, kid, { iss: issuer, aud: OIDC_CLI_CLIENT_ID, iat: now, exp: now + 600, jti: randomBytes(12).toString("base64url"), ...claims });
    },
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

interface BuildOptions {
  accounts: Record<string, OidcAccountClaims>;
  privateKey: KeyObject;
  kid: string;
  webClientSecret: string;
  webRedirects: string[];
}

function buildProvider(ProviderClass: typeof Provider, issuer: string, o: BuildOptions): Provider {
  const jwk = { ...o.privateKey.export({ format: "jwk" }), kid: o.kid, alg: "RS256", use: "sig" };
  return new ProviderClass(issuer, {
    clients: [
      {
        client_id: OIDC_WEB_CLIENT_ID,
        client_secret: o.webClientSecret,
        redirect_uris: o.webRedirects.length > 0 ? o.webRedirects : [`${issuer}/unused-callback`],
        grant_types: ["authorization_code"],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_basic",
      },
      {
        client_id: OIDC_CLI_CLIENT_ID,
        application_type: "native",
        token_endpoint_auth_method: "none",
        redirect_uris: ["http://127.0.0.1/callback"],
        grant_types: ["authorization_code", "urn:ietf:params:oauth:grant-type:device_code"],
        response_types: ["code"],
      },
    ],
    pkce: { required: () => true },
    features: { devInteractions: { enabled: true }, deviceFlow: { enabled: true } },
    // Profile claims in the ID token too (the default keeps them for userinfo in the code flow).
    conformIdTokenClaims: false,
    claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["name", "preferred_username"] },
    findAccount: (_ctx: unknown, id: string) => {
      const claims = o.accounts[id];
      return claims ? { accountId: id, claims: () => ({ sub: id, ...claims }) } : undefined;
    },
    jwks: { keys: [jwk] },
    cookies: { keys: [randomBytes(24).toString("hex")] },
  });
}

function signJwt(key: KeyObject, kid: string, payload: Record<string, unknown>): string {
  const part = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
  const input = `${part({ alg: "RS256", typ: "JWT", kid })}.${part(payload)}`;
  const signature = createSign("RSA-SHA256").update(input).sign(key).toString("base64url");
  return `${input}.${signature}`;
}
