import { z } from "zod";
import { UnavailableError } from "./errors.ts";
import { Id } from "./ids.ts";

/**
 * Ports and previews (issue 25, docs/ports.md): the ports a session declares,
 * the preview URL of each, and the tunnel a gateway opens to one through the
 * runner that holds the session. The tunnel's own frames are defined with
 * its implementation (@paddock/bus tunnel.ts); what both ends agree on by
 * name and number is here.
 */

export const PortNumber = z.number().int().min(1).max(65_535);

/** Nothing listens on the port in the session (or it refused the connection): a preview answers 502. */
export class PortUnreachableError extends UnavailableError {}

/** A port an app (or a session without apps) serves: reachable at its preview URL; private unless `public`. */
export const PortSpec = z
  .object({
    port: PortNumber,
    /** Reachable without a token (anyone with the URL). Private by default: the bearer token or a preview ticket. */
    public: z.boolean().optional(),
  })
  .strict();
export type PortSpec = z.infer<typeof PortSpec>;

/** Ports one app, or one session without apps, may declare. */
export const MAX_PORTS = 32;
export const PortList = z.array(PortSpec).max(MAX_PORTS);

/** A declared port as the session record shows it: its app (absent for spec.ports) and its preview URL. */
export const SessionPort = z
  .object({
    port: PortNumber,
    public: z.boolean(),
    app: Id.optional(),
    /** Path-absolute: resolve it against the gateway's base URL (the same on every replica, and across resumes on other runners). */
    url: z.string().max(256),
  })
  .strict();
export type SessionPort = z.infer<typeof SessionPort>;

/** The preview URL's path of a session's port (its prefix: everything below it goes to the app as its path). */
export function previewPath(sessionId: string, port: number): string {
  return `/v1/sessions/${sessionId}/ports/${port}/`;
}

/** A preview ticket's life (POST …/ports/:port/ticket): long enough for a browser to open the URL, no more. */
export const PREVIEW_TICKET_TTL_MS = 60_000;
/** A preview cookie's life (set by the ticket's one use), at most its token's. */
export const PREVIEW_COOKIE_TTL_MS = 3_600_000;
/** The query parameter a preview URL carries its ticket in (dropped by the redirect that sets the cookie). */
export const PREVIEW_TICKET_PARAM = "paddock_preview_ticket";
/** The cookie a browser carries for a private port (HttpOnly, SameSite=Lax, confined to the port's preview path). */
export const PREVIEW_COOKIE = "paddock_preview";
export const PREVIEW_SECRET_PREFIX = "pdp_";
export const PreviewSecret = z.string().regex(new RegExp(`^${PREVIEW_SECRET_PREFIX}[A-Za-z0-9_-]{43}$`));

/**
 * What KV `tokens` holds for a preview ticket (`preview-ticket.<sha256>`,
 * deleted by its one use) and for a preview cookie (`preview-cookie.<sha256>`):
 * whose token it stands for (re-read at every use: a revoked token fails) and
 * which port of which session it opens.
 */
export const PreviewGrant = z
  .object({
    workspaceId: Id,
    sessionId: Id,
    port: PortNumber,
    actorId: Id,
    tokenHash: z.string().regex(/^[0-9a-f]{64}$/),
    expiresAt: z.number().int(),
  })
  .strict();
export type PreviewGrant = z.infer<typeof PreviewGrant>;

/** The answer of POST /v1/sessions/:id/ports/:port/ticket: open `url` in a browser once, within a minute. */
export const PreviewTicket = z
  .object({
    ticket: PreviewSecret,
    url: z.string(),
    expiresAt: z.number().int(),
    /** The same ticket on the port's own preview host (absolute), when the gateway has one (PADDOCK_PREVIEW_ORIGIN). */
    hostUrl: z.string().optional(),
  })
  .strict();
export type PreviewTicket = z.infer<typeof PreviewTicket>;

/** What a tunnel carries at most per message, and how far a sender may run ahead of what its peer took (credit). */
export const TUNNEL_CHUNK_BYTES = 64 * 1024;
export const TUNNEL_WINDOW_BYTES = 1024 * 1024;
/** How often each end of a tunnel pings; two periods without a word from the other end break it. */
export const TUNNEL_PING_MS = 5_000;

/**
 * A runner's data plane (decision 0052): a TCP listener of the runner that
 * carries a preview's bytes straight to the gateway, off the bus. A gateway
 * asks for it with `via: "data"`; the runner answers where to dial and a
 * ticket, single-use and short-lived, that the gateway writes first on the
 * connection (its DATA_TICKET_BYTES raw); after it, the connection is the
 * port's. The ticket travels only on the bus, so the bus's permissions are
 * what authorise the connection.
 */
export const DATA_TICKET_BYTES = 32;
/** How long a ticket waits for its connection before the runner lets go of the port's. */
export const DATA_TICKET_TTL_MS = 10_000;
export const DataPlaneOffer = z
  .object({
    host: z.string().min(1).max(255),
    port: PortNumber,
    /** base64url of DATA_TICKET_BYTES random bytes. */
    ticket: z.string().regex(/^[A-Za-z0-9_-]{43}$/),
  })
  .strict();
export type DataPlaneOffer = z.infer<typeof DataPlaneOffer>;

/** Opens a tunnel to a declared port of a held session: the runner connects, then bytes flow on the tunnel subjects (or its data plane). */
export const TunnelOpenRequest = z
  .object({
    sessionId: Id,
    workspaceId: Id,
    placementGeneration: z.number().int().nonnegative(),
    port: PortNumber,
    /** Chosen by the gateway, unguessable: names both tunnel subjects. */
    tunnelId: Id,
    /** `data`: carry it on the runner's data plane when it has one (the reply's `data`), else on the bus. */
    via: z.enum(["bus", "data"]).optional(),
    /** The gateway authorised no caller (it read the port as public): open only if the port is public now. */
    publicOnly: z.boolean().optional(),
  })
  .strict();
export type TunnelOpenRequest = z.infer<typeof TunnelOpenRequest>;
/** Answered once the runner's connection to the port is made, or could not be (`connected: false`: nothing listens there). */
export const TunnelOpenReply = z.object({ tunnelId: Id, connected: z.boolean(), data: DataPlaneOffer.optional() }).strict();

/** Gateway → runner bytes of one tunnel (the runner subscribes to its own workspace subjects). */
export function tunnelInSubject(poolId: string, runnerId: string, tunnelId: string): string {
  return `paddock.workspace.${poolId}.${runnerId}.tunnel-in.${tunnelId}`;
}
/** Runner → gateway bytes of one tunnel: under the runner's own tokens, so no other runner can publish into it. */
export function tunnelOutSubject(poolId: string, runnerId: string, tunnelId: string): string {
  return `paddock.workspace.${poolId}.${runnerId}.tunnel-out.${tunnelId}`;
}
/** Every runner's tunnel output (the gateway's subscribe permission). */
export const TUNNEL_OUT_ALL = "paddock.workspace.*.*.tunnel-out.>";

/** The ports a layered spec declares, each once: its apps' (with the app's name), or spec.ports without apps. */
export function declaredPorts(spec: { apps?: ReadonlyArray<{ name: string; ports?: readonly PortSpec[] | undefined }> | undefined; ports?: readonly PortSpec[] | undefined }): Array<{ port: number; public: boolean; app?: string }> {
  if (spec.apps !== undefined) return spec.apps.flatMap((a) => (a.ports ?? []).map((p) => ({ port: p.port, public: p.public === true, app: a.name })));
  return (spec.ports ?? []).map((p) => ({ port: p.port, public: p.public === true }));
}

/** The record's `ports`: every declared port with its preview URL. */
export function sessionPorts(sessionId: string, spec: Parameters<typeof declaredPorts>[0]): SessionPort[] {
  return declaredPorts(spec).map((p) => ({ ...p, url: previewPath(sessionId, p.port) }));
}
