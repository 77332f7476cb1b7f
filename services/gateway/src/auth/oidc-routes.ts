import { randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { decodeJson } from "@paddock/bus";
import {
  Buckets,
  ForbiddenError,
  InvalidError,
  Membership,
  NotFoundError,
  PaddockError,
  PublicApi,
  SSO_HANDOFF_TTL_MS,
  type Actor,
  type HttpRoute,
  type SsoToken,
} from "@paddock/contracts";
import { hashToken, lazyKv, type Principal } from "./auth.ts";
import { RelyingParty, SignInStateError } from "./oidc.ts";
import { LOGIN_TTL_MS, OidcStore } from "./oidc-store.ts";
import { mintToken, purgeExpiredTokens } from "./tokens.ts";
import type { GatewayContext } from "../context.ts";
import { errorResponse, serve, type Answer, type Input, type Route } from "../http/http.ts";

/** The label of every token single sign-on mints (listed by `paddock token ls`). */
export const SSO_TOKEN_LABEL = "sso";
const CALLBACK_PATH = PublicApi.oidcCallback.path;

/**
 * Single sign-on (issue 28 item 8; docs/auth.md). Without PADDOCK_OIDC_ISSUER
 * every route but discovery is not_found, after its input is checked. Each
 * step keeps its state in KV `oidc` (oidc-store.ts), so any replica answers
 * any step; nothing here logs a code, a state, an ID token or a token.
 */
export function oidcRoutes(ctx: GatewayContext): Route[] {
  const { config, log, now } = ctx.deps;
  const rp = config.oidc ? new RelyingParty(config.oidc, log, now) : undefined;
  const store = new OidcStore(lazyKv(ctx.deps.nc, Buckets.oidc), now);
  const members = lazyKv(ctx.deps.nc, Buckets.members);
  const open = <R extends HttpRoute>(contract: R, handler: (input: Input<R, undefined>) => Promise<Answer<R> | void>) =>
    serve(contract, { authenticate: () => Promise.resolve(undefined), maxBodyBytes: config.maxBodyBytes }, handler);
  const enabled = (): RelyingParty => {
    if (!rp) throw new NotFoundError("single sign-on");
    return rp;
  };

  /** The workspace a signed-in actor gets a token for: the one asked for (a member of it), or their only one. */
  const workspaceOf = async (actorId: string, asked: string | undefined): Promise<string> => {
    const kv = await members();
    const mine: string[] = [];
    for await (const key of await kv.keys(`*.${actorId}`)) {
      const entry = await kv.get(key);
      const m = entry?.operation === "PUT" ? decodeJson(Membership, entry.value) : undefined;
      if (m?.ok && m.value.actorId === actorId && key === `${m.value.workspaceId}.${actorId}`) mine.push(m.value.workspaceId);
    }
    if (asked !== undefined) {
      if (!mine.includes(asked)) throw new ForbiddenError(`${actorId} is not a member of workspace ${asked}`);
      return asked;
    }
    const [only, ...more] = mine.sort();
    if (only === undefined) throw new ForbiddenError(`${actorId} is not a member of any workspace`);
    if (more.length > 0) throw new InvalidError(`${actorId} is a member of several workspaces (${mine.join(", ")}): choose one with workspaceId`);
    return only;
  };

  /** Mints the person's token, with the membership read again now. */
  const mint = async (workspaceId: string, actor: Actor, via: "console" | "cli"): Promise<SsoToken> => {
    await workspaceOf(actor.id, workspaceId);
    await purgeExpiredTokens(ctx, { workspaceId, actorId: actor.id }, SSO_TOKEN_LABEL);
    // Minted on the person's own authority: rate-limited per person, not against any token's.
    const minter: Principal = { scope: { workspaceId, actor }, tokenHash: `sso.${workspaceId}.${actor.id}` };
    const created = await mintToken(ctx, minter, { workspaceId, actor }, { label: SSO_TOKEN_LABEL, expiresInMs: enabled().config.tokenTtlMs });
    log.info({ workspaceId, actorId: actor.id, tokenId: created.id, via }, "sso token minted");
    return { token: created.token, id: created.id, workspaceId, actor: created.actor, expiresAt: created.expiresAt ?? now() };
  };

  return [
    open(PublicApi.oidcDiscovery, () => {
      const o = rp?.config;
      const body = o
        ? { enabled: true, issuer: o.issuer, consoleLogin: o.clientId !== undefined, ...(o.cliClientId !== undefined ? { cliClientId: o.cliClientId } : {}), scopes: o.scopes }
        : { enabled: false };
      return Promise.resolve({ status: 200, body });
    }),

    open(PublicApi.oidcLogin, ({ req, res, query }) =>
      pageErrors(req, res, async () => {
        const party = enabled();
        if (!party.consoleLogin) throw new NotFoundError("console sign-on");
        // Each start writes to KV before anyone signed in: bounded per client address.
        ctx.creates.check(`sso-login.${req.socket.remoteAddress ?? "?"}`, "sign-ins");
        const redirectUri = redirectUriOf(req, config.publicUrl);
        const start = await party.startLogin(redirectUri);
        const { workspaceId, returnTo } = query;
        const binder = randomBytes(32).toString("base64url");
        await store.putLogin(start.state, {
          nonce: start.nonce,
          verifier: start.verifier,
          redirectUri,
          binderHash: hashToken(binder),
          returnTo,
          ...(workspaceId !== undefined ? { workspaceId } : {}),
          expiresAt: now() + LOGIN_TTL_MS,
        });
        redirect(res, start.url.href, binderCookie(start.state, binder, redirectUri, LOGIN_TTL_MS));
      }),
    ),

    open(PublicApi.oidcCallback, ({ req, res, query }) =>
      pageErrors(req, res, async () => {
        const party = enabled();
        if (query.state === undefined) throw new SignInStateError();
        // Spent first: a replayed or tampered callback is refused whatever else it carries.
        const login = await store.spendLogin(query.state);
        // The browser that started this login, not one an attacker's callback URL was sent to.
        if (!sameBinder(cookieOf(req, binderName(query.state)), login.binderHash)) throw new SignInStateError();
        const callbackUrl = new URL(login.redirectUri);
        callbackUrl.search = new URL(req.url ?? "/", "http://gateway").search;
        const actorId = await party.finishLogin(callbackUrl, { ...login, state: query.state });
        const workspaceId = await workspaceOf(actorId, login.workspaceId);
        const code = await store.putHandoff({ workspaceId, actor: { id: actorId, kind: "user" }, expiresAt: now() + SSO_HANDOFF_TTL_MS });
        // The fragment never reaches a server; the console takes it out of the address bar at once.
        redirect(res, `${login.returnTo}#sso=${code}`, binderCookie(query.state, "", login.redirectUri, 0));
      }),
    ),

    open(PublicApi.oidcRedeem, async ({ body }) => {
      const { handoff } = await body();
      enabled();
      const h = await store.spendHandoff(handoff);
      return { status: 201, body: await mint(h.workspaceId, h.actor, "console") };
    }),

    open(PublicApi.oidcExchange, async ({ body }) => {
      const { idToken, workspaceId } = await body();
      const { actorId } = await enabled().verifyCliIdToken(idToken);
      await store.spendIdToken(idToken);
      const ws = await workspaceOf(actorId, workspaceId);
      return { status: 201, body: await mint(ws, { id: actorId, kind: "user" }, "cli") };
    }),
  ];
}

/** The redirect URI of the console's client: the configured public URL, else this request's own origin (http, loopback development). */
function redirectUriOf(req: IncomingMessage, publicUrl: string | undefined): string {
  if (publicUrl !== undefined) return `${publicUrl}${CALLBACK_PATH}`;
  const host = req.headers.host ?? "";
  if (!/^[A-Za-z0-9.-]{1,253}(:\d{1,5})?$|^\[[0-9A-Fa-f:.]{2,45}\](:\d{1,5})?$/.test(host)) throw new InvalidError("Host: not a host name (set PADDOCK_PUBLIC_URL)");
  return `http://${host}${CALLBACK_PATH}`;
}

function redirect(res: ServerResponse, location: string, cookie: string): void {
  res.writeHead(303, { location, "set-cookie": cookie, "cache-control": "no-store", "referrer-policy": "no-referrer", "content-length": 0 });
  res.end();
}

/** One cookie per login (several tabs may sign in at once), named from its state's hash. */
const binderName = (state: string) => `paddock_sso_${hashToken(state).slice(0, 16)}`;

/** The login's browser binding: HttpOnly, sent only to the callback, Lax (the provider's redirect is a top-level GET). */
function binderCookie(state: string, value: string, redirectUri: string, maxAgeMs: number): string {
  const secure = redirectUri.startsWith("https:") ? "; Secure" : "";
  return `${binderName(state)}=${value}; Path=${CALLBACK_PATH}; Max-Age=${String(Math.floor(maxAgeMs / 1000))}; HttpOnly; SameSite=Lax${secure}`;
}

function cookieOf(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? "").split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === name) return v.join("=");
  }
  return undefined;
}

function sameBinder(value: string | undefined, binderHash: string): boolean {
  return value !== undefined && value !== "" && timingSafeEqual(Buffer.from(hashToken(value), "hex"), Buffer.from(binderHash, "hex"));
}

/**
 * Runs a step a browser navigates to: a PaddockError is answered as a short
 * HTML page when the browser asks for HTML (the same status and code), else
 * as the usual JSON error; anything else goes to the gateway's handler.
 */
async function pageErrors(req: IncomingMessage, res: ServerResponse, step: () => Promise<void>): Promise<void> {
  try {
    await step();
  } catch (err) {
    if (!(err instanceof PaddockError) || !(req.headers.accept ?? "").includes("text/html")) throw err;
    const { status, body } = errorResponse(err);
    const html = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign-in failed</title></head><body><h1>Sign-in failed</h1><p><code>${escapeHtml(body.error.code)}</code>: ${escapeHtml(body.error.message)}</p><p><a href="/">Back to Paddock</a></p></body></html>`;
    res.writeHead(status, {
      "content-type": "text/html; charset=utf-8",
      "content-length": Buffer.byteLength(html),
      "cache-control": "no-store",
      "content-security-policy": "default-src 'none'; base-uri 'none'; frame-ancestors 'none'",
      "x-content-type-options": "nosniff",
    });
    res.end(html);
  }
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
