/**
 * How a browser opens a private port (docs/ports.md): it cannot send a
 * bearer token, so the token's owner asks for a single-use ticket
 * (`POST /v1/sessions/:id/preview-ticket {port}`, a minute) and opens the
 * URL it is given; that one use sets an HttpOnly cookie confined to the
 * port's preview path (an hour, never past the token's own expiry) and
 * redirects to the same URL without the ticket. KV `tokens` holds both as
 * PreviewGrants under the sha256 of their value; every use re-reads the
 * token they stand for (a revoked one fails) and the caller's membership.
 * The cookie never reaches the session's app.
 */
import { randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { callRpc, decodeJson, encodeJson } from "@paddock/bus";
import {
  Api,
  HttpApi,
  NotFoundError,
  PREVIEW_COOKIE,
  PREVIEW_COOKIE_TTL_MS,
  PREVIEW_SECRET_PREFIX,
  PREVIEW_TICKET_PARAM,
  PREVIEW_TICKET_TTL_MS,
  PreviewGrant,
  PreviewSecret,
  previewPath,
  UnauthenticatedError,
  type Session,
} from "@paddock/contracts";
import { Action, hashToken, type Principal } from "../auth/auth.ts";
import { principalOfGrant, spendOnce } from "../auth/tokens.ts";
import { sessionResource, type GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";
import { previewCookieOf } from "./preview-headers.ts";
import { previewHostsOf, previewHostUrl, type PreviewMatch } from "./preview-match.ts";

const ticketKey = (value: string) => `preview-ticket.${hashToken(value)}`;
const cookieKey = (value: string) => `preview-cookie.${hashToken(value)}`;

export class PreviewAccess {
  constructor(private readonly ctx: GatewayContext) {}

  routes(): Route[] {
    const { ctx } = this;
    return [
      ctx.serve(HttpApi.createPreviewTicket, async ({ caller, params, body: readBody }) => {
        const { port } = await readBody();
        const target = await callRpc(ctx.deps.nc, Api.previewTarget, { sessionId: params.id, port }, { timeoutMs: ctx.deps.config.rpcTimeoutMs });
        await this.authorizeOn(caller, target.session);
        const ticket = PREVIEW_SECRET_PREFIX + randomBytes(32).toString("base64url");
        const expiresAt = Math.min(ctx.deps.now() + PREVIEW_TICKET_TTL_MS, caller.expiresAt ?? Number.POSITIVE_INFINITY);
        const grant: PreviewGrant = { workspaceId: target.session.workspaceId, sessionId: target.session.id, port, actorId: caller.scope.actor.id, tokenHash: caller.tokenHash, expiresAt };
        await (await ctx.tokens()).create(ticketKey(ticket), encodeJson(PreviewGrant, grant));
        const hosts = previewHostsOf(ctx.deps.config.previewOrigin);
        const hostUrl = hosts ? { hostUrl: `${previewHostUrl(hosts, target.session.id, port)}?${PREVIEW_TICKET_PARAM}=${ticket}` } : {};
        return { status: 201, body: { ticket, url: `${previewPath(target.session.id, port)}?${PREVIEW_TICKET_PARAM}=${ticket}`, expiresAt, ...hostUrl } };
      }),
    ];
  }

  /**
   * A preview URL carrying a ticket: spends it (its first use deletes it; a
   * CAS, so two uses race to one winner), sets the cookie and redirects to
   * the URL without it. Every failure is the same 401.
   */
  async redeem(req: IncomingMessage, res: ServerResponse, m: PreviewMatch): Promise<void> {
    const { sessionId, port } = m;
    const url = new URL(req.url ?? "/", "http://gateway");
    const ticket = url.searchParams.get(PREVIEW_TICKET_PARAM) ?? "";
    if (!PreviewSecret.safeParse(ticket).success) throw new UnauthenticatedError();
    const grant = await spendOnce(this.ctx, ticketKey(ticket), PreviewGrant);
    if (grant.sessionId !== sessionId || grant.port !== port || grant.expiresAt <= this.ctx.deps.now()) throw new UnauthenticatedError();
    const principal = await principalOfGrant(this.ctx, grant);
    const value = PREVIEW_SECRET_PREFIX + randomBytes(32).toString("base64url");
    const expiresAt = Math.min(this.ctx.deps.now() + PREVIEW_COOKIE_TTL_MS, principal.expiresAt ?? Number.POSITIVE_INFINITY);
    await (await this.ctx.tokens()).create(cookieKey(value), encodeJson(PreviewGrant, { ...grant, expiresAt }));
    url.searchParams.delete(PREVIEW_TICKET_PARAM);
    const path = m.prefix;
    const maxAgeS = Math.max(1, Math.floor((expiresAt - this.ctx.deps.now()) / 1_000));
    res.writeHead(303, {
      location: `${url.pathname}${url.search}`,
      "set-cookie": `${PREVIEW_COOKIE}=${value}; Path=${path}; Max-Age=${maxAgeS}; HttpOnly; SameSite=Lax`,
      "cache-control": "no-store",
    });
    res.end();
  }

  /** A private port's caller: the bearer token, else the preview cookie for this very port; authorized to preview the session. */
  async principalFor(req: IncomingMessage, session: Session, port: number): Promise<Principal> {
    const cookie = req.headers.authorization === undefined ? previewCookieOf(req.headers.cookie) : undefined;
    const principal = cookie === undefined ? await this.ctx.principal(req) : await this.fromCookie(cookie, session, port);
    await this.authorizeOn(principal, session);
    return principal;
  }

  private async authorizeOn(principal: Principal, session: Session): Promise<void> {
    // Another workspace's session is not there for this caller.
    if (principal.scope.workspaceId !== session.workspaceId) throw new NotFoundError("port");
    await this.ctx.authorizer.authorize(principal.scope, Action.preview, sessionResource(session));
  }

  private async fromCookie(value: string, session: Session, port: number): Promise<Principal> {
    if (!PreviewSecret.safeParse(value).success) throw new UnauthenticatedError();
    const entry = await (await this.ctx.tokens()).get(cookieKey(value));
    const decoded = entry?.operation === "PUT" ? decodeJson(PreviewGrant, entry.value) : undefined;
    const g = decoded?.ok ? decoded.value : undefined;
    if (!g || g.sessionId !== session.id || g.port !== port || g.expiresAt <= this.ctx.deps.now()) throw new UnauthenticatedError();
    return principalOfGrant(this.ctx, g);
  }

}
