import { ScreenCache } from "./screens.ts";
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
  type Rpc,
  type Scope,
  type Session,
} from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { authenticatePrincipal, Authorizer, lazyKv, principalOfHash, type Principal, type Resource } from "./auth.ts";
import type { GatewayConfig } from "./config.ts";
import { WindowLimiter } from "./limits.ts";
import type { GatewayMetrics } from "./metrics.ts";
import { parseWith } from "./http.ts";

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

  constructor(readonly deps: GatewayDeps) {
    this.tokens = lazyKv(deps.nc, Buckets.tokens);
    this.authorizer = new Authorizer(lazyKv(deps.nc, Buckets.members));
    this.creates = new WindowLimiter(deps.config.createsPerMinute, 60_000, deps.now);
    this.after = deps.after ?? realAfter;
    this.screens = new ScreenCache(() => this.jsm(), deps.metrics);
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

  /** The caller with its token hash (rate limits, revocation of open sockets). */
  principal(req: IncomingMessage): Promise<Principal> {
    return authenticatePrincipal(this.tokens, req.headers.authorization, this.deps.now);
  }

  /** The principal of a token hash as KV holds it now (re-checks at ticket use and on token changes). */
  principalOfHash(tokenHash: string): Promise<Principal> {
    return principalOfHash(this.tokens, tokenHash, this.deps.now);
  }

  call<R extends Rpc<z.ZodType, z.ZodType>>(rpc: R, request: z.input<R["request"]>): Promise<z.infer<R["result"]>> {
    return callRpc(this.deps.nc, rpc, request, { timeoutMs: this.deps.config.rpcTimeoutMs });
  }

  /** Fetches a session through the scheduler (scoped by workspace: another's is not_found). */
  async getSession(scope: Scope, rawId: string | undefined): Promise<Session> {
    const sessionId = parseWith(Id, rawId, "session id");
    const { session } = await this.call(Api.getSession, { scope, sessionId });
    return session;
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
