import * as client from "openid-client";
import { createRemoteJWKSet, jwtVerify, type JWTPayload } from "jose";
import { actorIdOfClaim, ForbiddenError, UnauthenticatedError, UnavailableError } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { OidcConfig } from "../config.ts";

/** How old an ID token the CLI exchanges may be (its `iat`): it is used at once; KV `oidc` remembers it at least this long. */
export const ID_TOKEN_MAX_AGE_MS = 10 * 60_000;
/** How long one request to the provider (discovery, token endpoint) may take. */
const PROVIDER_TIMEOUT_S = 10;
/** ID token signatures accepted: asymmetric only (a shared-secret HS* token could be forged by any client holding it). */
const ASYMMETRIC = /^(RS|PS|ES)(256|384|512)$|^EdDSA$|^Ed25519$/;

/** A sign-in the provider, or the checks of its answer, refused: nothing is minted. */
export class SignInRefusedError extends UnauthenticatedError {
  constructor(reason: string, options?: { cause?: unknown }) {
    super(`sign-in refused: ${reason}`, options);
  }
}

/** The state of a callback names no login started here, or one already finished or expired. */
export class SignInStateError extends UnauthenticatedError {
  constructor() {
    super("sign-in expired, was already used, or did not start here: sign in again");
  }
}

/** What a login needs back at its callback (kept in KV `oidc` under its state). */
export interface LoginStart {
  url: URL;
  state: string;
  nonce: string;
  verifier: string;
}

/**
 * The gateway as an OpenID Connect relying party (openid-client): issuer
 * discovery (lazy, retried after a failure, so a provider that is down never
 * stops the gateway), the console's authorization code flow with PKCE S256,
 * state and nonce, and the check of ID tokens the CLI's client obtained
 * (signature by the issuer's JWKS, iss, aud, exp, iat). The person's actor id
 * is the configured claim, escaped to an actor id (actorIdOfClaim).
 */
export class RelyingParty {
  private discovering: Promise<client.Configuration> | undefined;
  private jwks: ReturnType<typeof createRemoteJWKSet> | undefined;

  constructor(
    readonly config: OidcConfig,
    private readonly log: Logger,
    private readonly now: () => number,
  ) {}

  get consoleLogin(): boolean {
    return this.config.clientId !== undefined;
  }

  /** The provider's metadata and the console's client (or the CLI's, when only it is configured). */
  private discover(): Promise<client.Configuration> {
    const { issuer, clientId, cliClientId, clientSecret } = this.config;
    const id = clientId ?? cliClientId ?? "";
    const insecure = new URL(issuer).protocol === "http:";
    this.discovering ??= client
      .discovery(new URL(issuer), id, clientId !== undefined ? clientSecret : undefined, undefined, {
        timeout: PROVIDER_TIMEOUT_S,
        ...(insecure ? { execute: [client.allowInsecureRequests] } : {}),
      })
      .catch((err: unknown) => {
        this.discovering = undefined;
        this.log.warn({ err: errorName(err), issuer }, "oidc discovery failed");
        throw new UnavailableError("the identity provider cannot be reached", { cause: err, retryAfterMs: 5_000 });
      });
    return this.discovering;
  }

  /** An authorization URL for the console's client, with fresh state, nonce and PKCE verifier. */
  async startLogin(redirectUri: string): Promise<LoginStart> {
    const config = await this.discover();
    const verifier = client.randomPKCECodeVerifier();
    const state = client.randomState();
    const nonce = client.randomNonce();
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri,
      scope: this.config.scopes,
      code_challenge: await client.calculatePKCECodeChallenge(verifier),
      code_challenge_method: "S256",
      state,
      nonce,
    });
    return { url, state, nonce, verifier };
  }

  /**
   * Exchanges the callback's code (openid-client checks state, iss, the ID
   * token's signature, aud, exp and nonce) and answers the actor id.
   */
  async finishLogin(callbackUrl: URL, pending: { state: string; nonce: string; verifier: string; redirectUri: string }): Promise<string> {
    const config = await this.discover();
    let tokens: Awaited<ReturnType<typeof client.authorizationCodeGrant>>;
    try {
      tokens = await client.authorizationCodeGrant(
        config,
        callbackUrl,
        { pkceCodeVerifier: pending.verifier, expectedState: pending.state, expectedNonce: pending.nonce, idTokenExpected: true },
        { redirect_uri: pending.redirectUri },
      );
    } catch (err) {
      throw this.refusal(err);
    }
    const claims = tokens.claims();
    if (!claims) throw new SignInRefusedError("the provider answered no ID token");
    if (claims[this.config.actorClaim] === undefined) {
      // Some providers put profile claims only in userinfo for the code flow.
      try {
        const info = await client.fetchUserInfo(config, tokens.access_token, claims.sub);
        return this.actorOf({ ...info, ...claims });
      } catch (err) {
        if (err instanceof UnauthenticatedError || err instanceof ForbiddenError) throw err;
        throw this.refusal(err);
      }
    }
    return this.actorOf(claims);
  }

  /** Checks an ID token issued to the CLI's client and answers its actor id and expiry. */
  async verifyCliIdToken(idToken: string): Promise<{ actorId: string; expiresAt: number }> {
    const cliClientId = this.config.cliClientId;
    if (cliClientId === undefined) throw new SignInRefusedError("no CLI client is configured");
    const meta = (await this.discover()).serverMetadata();
    if (meta.jwks_uri === undefined) throw new UnavailableError("the identity provider publishes no jwks_uri");
    this.jwks ??= createRemoteJWKSet(new URL(meta.jwks_uri), { timeoutDuration: PROVIDER_TIMEOUT_S * 1000 });
    const algorithms = (meta.id_token_signing_alg_values_supported ?? ["RS256"]).filter((a) => ASYMMETRIC.test(a));
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(idToken, this.jwks, {
        issuer: meta.issuer,
        audience: cliClientId,
        algorithms,
        currentDate: new Date(this.now()),
        maxTokenAge: `${ID_TOKEN_MAX_AGE_MS / 1000}s`,
        requiredClaims: ["sub", "iat", "exp"],
        clockTolerance: 30,
      }));
    } catch (err) {
      throw this.refusal(err);
    }
    // An ID token for several audiences is the CLI's only when it was issued to it (OIDC Core 3.1.3.7).
    if (Array.isArray(payload.aud) && payload.aud.length > 1 && payload.azp !== cliClientId) throw new SignInRefusedError("the ID token was not issued to the CLI");
    return { actorId: this.actorOf(payload), expiresAt: (payload.exp ?? 0) * 1000 };
  }

  /** The actor id the configured claim names; an email must be verified by the provider. */
  private actorOf(claims: Record<string, unknown>): string {
    const claim = this.config.actorClaim;
    const value = claims[claim];
    if (typeof value !== "string" || value === "") throw new SignInRefusedError(`the ID token has no ${claim} claim`);
    if (claim === "email" && claims.email_verified !== true) throw new ForbiddenError("the identity provider has not verified this email address");
    const actorId = actorIdOfClaim(value);
    if (actorId === undefined) throw new ForbiddenError(`the ${claim} claim is too long for an actor id`);
    return actorId;
  }

  /** A failure of the flow as the caller sees it: the provider unreachable is retryable, anything else refused (never echoing tokens). */
  private refusal(err: unknown): Error {
    if (err instanceof UnauthenticatedError || err instanceof UnavailableError) return err;
    if (err instanceof client.AuthorizationResponseError || err instanceof client.ResponseBodyError) {
      return new SignInRefusedError(`the identity provider answered ${safeCode(err.error)}`, { cause: err });
    }
    const code = (err as { code?: unknown }).code;
    if ((err instanceof TypeError && /fetch failed/.test(err.message)) || code === "ERR_JWKS_TIMEOUT" || (err instanceof Error && err.name === "TimeoutError")) {
      return new UnavailableError("the identity provider cannot be reached", { cause: err, retryAfterMs: 5_000 });
    }
    return new SignInRefusedError(`the provider's answer did not pass its checks (${typeof code === "string" ? safeCode(code) : "invalid"})`, { cause: err });
  }
}

/** An OAuth or library error code, echoed only when it is one (no free text from the provider reaches a page). */
function safeCode(code: string): string {
  return /^[A-Za-z0-9_.-]{1,64}$/.test(code) ? code : "an error";
}

function errorName(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}
