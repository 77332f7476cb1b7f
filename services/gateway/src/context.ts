import { ScreenCache } from "./terminal/screens.ts";
import type { IncomingMessage } from "node:http";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import type { z } from "zod";
import { callRpc } from "@paddock/bus";
import {
  Api,
  appsOf,
  Buckets,
  DEFAULT_APP,
  Id,
  InvalidError,
  NotFoundError,
  type Environment,
  type HttpRoute,
  type Rpc,
  type Scope,
  type Session,
  visibleTo,
} from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { Authorizer, lazyKv, principalOfHash, tokenHashOf, type Principal, type Resource } from "./auth/auth.ts";
import type { GatewayConfig } from "./config.ts";
import { WindowLimiter } from "./http/limits.ts";
import type { GatewayMetrics } from "./metrics.ts";
import { parseWith, serve, type Answer, type Input, type Route } from "./http/http.ts";
import { sessionRecordReader, type SessionRecordReader } from "./session-records.ts";

/** What createGateway is given; everything a test wants to control is here. */
export interface GatewayDeps {
  nc: NatsConnection;
  config: GatewayConfig;
  log: Logger;
  metrics: GatewayMetrics;
  now: () => number;
  newId: () => string;
  /** Runs fn every ms until the returned stop is called (presence heartbeats); default: an unref'd setInterval. */
  every?: Every;
  /** Runs fn once after ms unless the returned cancel is called (token expiry on open sockets); default: an unref'd setTimeout. */
  after?: After;
  /** Reads stored session records; default: from the sessions bucket's stream leader (sessionRecordReader). */
  readSession?: SessionRecordReader;
}

export type Every = (ms: number, fn: () => void) => () => void;
export type After = (ms: number, fn: () => void) => () => void;

export const realAfter: After = (ms, fn) => {
  // setTimeout caps at 2^31-1 ms; a longer wait fires early and the caller re-checks the clock.
  const timer = setTimeout(fn, Math.min(ms, 2 ** 31 - 1));
  timer.unref();
  return () => clearTimeout(timer);
};

export const realEvery: Every = (ms, fn) => {
  const timer = setInterval(fn, ms);
  timer.unref();
  return () => clearInterval(timer);
};

/** Member-key guesses kept (one per token seen lately; the oldest goes first). */
const MAX_MEMBER_HINTS = 10_000;

/** Shared by every route: the deps plus authentication, the Authorizer and the scheduler calls. */
export class GatewayContext {
  readonly authorizer: Authorizer;
  readonly tokens: () => Promise<KV>;
  /** Creates (sessions, tokens) per minute per token. */
  readonly creates: WindowLimiter;
  readonly after: After;
  /** Headless screens per session app, fed incrementally for `since=screen`. */
  readonly screens: ScreenCache;
  private jsmOpening: Promise<JetStreamManager> | undefined;
  /**
   * Token hash → the scope its token last named. Only a guess of which
   * membership, and which workspace's session, to read early; no decision is
   * taken from it.
   */
  private readonly memberHints = new Map<string, Scope>();
  /** A request's session read begun beside its authentication (readEarly), taken by its first getSession. */
  private readonly earlySessions = new WeakMap<IncomingMessage, { scope: Scope; sessionId: string; read: Promise<Session> }>();
  private readonly readRecord: SessionRecordReader;

  constructor(readonly deps: GatewayDeps) {
    this.tokens = lazyKv(deps.nc, Buckets.tokens);
    this.authorizer = new Authorizer(lazyKv(deps.nc, Buckets.members));
    this.creates = new WindowLimiter(deps.config.createsPerMinute, 60_000, deps.now);
    this.after = deps.after ?? realAfter;
    this.screens = new ScreenCache(() => this.jsm(), deps.metrics);
    this.readRecord = deps.readSession ?? sessionRecordReader(() => this.jsm());
  }

  /** The JetStream manager, created once (direct gets read TERM and AUDIT). */
  jsm(): Promise<JetStreamManager> {
    this.jsmOpening ??= jetstreamManager(this.deps.nc).catch((err: unknown) => {
      this.jsmOpening = undefined;
      throw err;
    });
    return this.jsmOpening;
  }

  async authenticate(req: IncomingMessage): Promise<Scope> {
    return (await this.principal(req)).scope;
  }

  /**
   * The caller with its token hash (rate limits, revocation of open sockets).
   * Its membership read starts here, for the Authorizer: beside the token
   * read when this token resolved before (the last principal it named is the
   * guess, used only if the token still names it), else right after it.
   */
  async principal(req: IncomingMessage): Promise<Principal> {
    const tokenHash = tokenHashOf(req.headers.authorization);
    const hint = this.memberHints.get(tokenHash);
    const early = hint ? this.authorizer.membership(hint.workspaceId, hint.actor.id) : undefined;
    // Taken by prefetch below, or dropped when the token no longer authenticates.
    early?.catch(() => undefined);
    const principal = await principalOfHash(this.tokens, tokenHash, this.deps.now).catch((err: unknown) => {
      // A token that no longer authenticates sets off no early read again.
      this.memberHints.delete(tokenHash);
      throw err;
    });
    const { scope } = principal;
    // A session's own principal mostly acts without a membership: its reads stay on demand.
    if (scope.sessionId !== undefined) return principal;
    const same = hint !== undefined && sameScope(hint, scope);
    this.authorizer.prefetch(scope, same ? early : undefined);
    if (!same) this.rememberHint(tokenHash, scope);
    return principal;
  }

  private rememberHint(tokenHash: string, scope: Scope): void {
    this.memberHints.delete(tokenHash);
    if (this.memberHints.size >= MAX_MEMBER_HINTS) {
      const oldest = this.memberHints.keys().next();
      if (!oldest.done) this.memberHints.delete(oldest.value);
    }
    this.memberHints.set(tokenHash, scope);
  }

  /**
   * Begins reading the session of a `/v1/sessions/:id…` request beside its
   * authentication, in the workspace its token named last time (the scope
   * the read would have). Used by the request's getSession only if the token
   * still names that scope; the record goes nowhere before the call is
   * authorized.
   */
  readEarly(req: IncomingMessage, rawId: string | undefined): void {
    const hint = this.memberHints.get(tokenHashOf(req.headers.authorization));
    const id = Id.safeParse(rawId);
    if (!hint || !id.success) return;
    const read = this.readSession(hint, id.data);
    read.catch(() => undefined);
    this.earlySessions.set(req, { scope: hint, sessionId: id.data, read });
  }

  /** The principal of a token hash as KV holds it now (re-checks at ticket use and on token changes). */
  principalOfHash(tokenHash: string): Promise<Principal> {
    return principalOfHash(this.tokens, tokenHash, this.deps.now);
  }

  /** Serves a contract route for callers with a bearer token (every /v1 route but the terminal upgrade). */
  serve<R extends HttpRoute>(contract: R, handler: (input: Input<R, Principal>) => Promise<Answer<R> | void>): Route {
    return serve(contract, { authenticate: (req) => this.principal(req), maxBodyBytes: this.deps.config.maxBodyBytes }, handler);
  }

  /**
   * Serves a `/v1/sessions/:id…` route whose handler first reads the session
   * with `getSession(scope, id, req)`: that read begins beside the
   * authentication (readEarly).
   */
  serveSession<R extends HttpRoute>(contract: R, handler: (input: Input<R, Principal>) => Promise<Answer<R> | void>): Route {
    if (!contract.path.startsWith("/v1/sessions/:id")) throw new Error(`${contract.path} is not a session's route`);
    const early = (req: IncomingMessage, params: Record<string, string>) => this.readEarly(req, params.id);
    return serve(contract, { authenticate: (req) => this.principal(req), maxBodyBytes: this.deps.config.maxBodyBytes, early }, handler);
  }

  call<R extends Rpc<z.ZodType, z.ZodType>>(rpc: R, request: z.input<R["request"]>): Promise<z.infer<R["result"]>> {
    return callRpc(this.deps.nc, rpc, request, { timeoutMs: this.deps.config.rpcTimeoutMs });
  }

  /**
   * Reads a session as scope may know it (another workspace's, or one a
   * session's token may not see, is not_found). With req, the read its
   * request began early is taken when it was made in this very scope.
   */
  async getSession(scope: Scope, rawId: string | undefined, req?: IncomingMessage): Promise<Session> {
    const sessionId = parseWith(Id, rawId, "session id");
    const early = req && this.earlySessions.get(req);
    if (req) this.earlySessions.delete(req);
    if (early && early.sessionId === sessionId && sameScope(early.scope, scope)) return early.read;
    return this.readSession(scope, sessionId);
  }

  /** The stored record itself, not a scheduler call: one hop fewer on every session route (decision 0071). */
  private async readSession(scope: Scope, sessionId: string): Promise<Session> {
    const found = await this.readRecord(scope.workspaceId, sessionId);
    if (!found || !visibleTo(scope, found)) throw new NotFoundError("session");
    return found;
  }

  /** Fetches an environment through the scheduler (scoped by workspace like sessions). */
  async getEnvironment(scope: Scope, rawId: string | undefined): Promise<Environment> {
    const environmentId = parseWith(Id, rawId, "environment id");
    const { environment } = await this.call(Api.getEnvironment, { scope, environmentId });
    return environment;
  }
}

export function sessionResource(session: Session): Resource {
  return { kind: "session", workspaceId: session.workspaceId, id: session.id, creatorId: session.creatorId };
}

export function environmentResource(environment: Environment): Resource {
  return { kind: "environment", workspaceId: environment.workspaceId, id: environment.id };
}

export function workspaceResource(scope: Scope): Resource {
  return { kind: "workspace", workspaceId: scope.workspaceId };
}

/** The app an attach or log read is about: the only one by default, several need a choice. */
export function resolveApp(session: Session, requested: string | undefined): string {
  const apps = appsOf(session.spec);
  if (requested === undefined) {
    const only = apps.length === 1 ? apps[0] : undefined;
    if (!only) throw new InvalidError(`session has ${apps.length} apps: choose one with ?app`);
    return only.name ?? DEFAULT_APP;
  }
  if (!apps.some((a) => a.name === requested)) throw new NotFoundError("app");
  return requested;
}

/** Whether two scopes read the same: workspace, actor, and neither a session's own principal. */
function sameScope(a: Scope, b: Scope): boolean {
  return a.workspaceId === b.workspaceId && a.actor.id === b.actor.id && a.actor.kind === b.actor.kind && a.sessionId === undefined && b.sessionId === undefined;
}
