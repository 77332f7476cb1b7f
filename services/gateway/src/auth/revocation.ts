import { KvWatchInclude, type KV, type KvWatchEntry } from "@nats-io/kv";
import type { QueuedIterator } from "@nats-io/transport-node";
import { Buckets, PaddockError, UnauthenticatedError, type Scope } from "@paddock/contracts";
import { lazyKv, memberKey, TokenExpiredError, type Principal } from "./auth.ts";
import type { GatewayContext } from "../context.ts";

/** An open stream (terminal socket, followed events) that dies with its token or its access. */
export interface Revocable {
  readonly tokenHash: string;
  /** Closes the stream (a terminal socket with CLOSE_REVOKED). */
  revoke(reason: string): void;
}

/**
 * Re-runs the Authorizer for what the stream does (its action on its
 * resource) with a fresh copy of the principal's scope; rejects when that is
 * no longer allowed.
 */
export type Reauthorize = (scope: Scope) => Promise<void>;

interface Guarded {
  principal: Principal;
  reauthorize: Reauthorize;
  cancelExpiry?: (() => void) | undefined;
}

/**
 * Keeps open streams honest about their authorization. Two watches: the token
 * records of KV `tokens` (keys `*`: bare hashes; tickets and the id index are
 * deeper keys) and the memberships of KV `members` (`<workspace>.<actor>`).
 * A change to the token or the membership a stream lives by re-reads the
 * token and re-runs the Authorizer for the stream's action; a token that no
 * longer authenticates, or an action no longer allowed (a member removed, an
 * admin controller downgraded), closes the stream, as does any failure to
 * re-check (closed, not open, on doubt). An expiry timer (injected `after`,
 * re-checked on the injected clock) closes it when the token expires.
 */
export class StreamGuard {
  private readonly streams = new Map<Revocable, Guarded>();
  private readonly byHash = new Map<string, Set<Revocable>>();
  private readonly byMember = new Map<string, Set<Revocable>>();
  private readonly members: () => Promise<KV>;
  private starting: Promise<void> | undefined;
  private watchers: Array<QueuedIterator<KvWatchEntry>> = [];
  private stopped = false;

  constructor(private readonly ctx: GatewayContext) {
    this.members = lazyKv(ctx.deps.nc, Buckets.members);
  }

  /** Resolves once both watches run: a change after this is seen. Call before registering a stream. */
  ready(): Promise<void> {
    this.starting ??= this.start().catch((err: unknown) => {
      this.starting = undefined;
      throw err;
    });
    return this.starting;
  }

  private async start(): Promise<void> {
    const [tokens, members] = await Promise.all([this.ctx.tokens(), this.members()]);
    const watchers = await Promise.all([
      tokens.watch({ key: "*", include: KvWatchInclude.UpdatesOnly }),
      members.watch({ key: ">", include: KvWatchInclude.UpdatesOnly }),
    ]);
    if (this.stopped) {
      for (const w of watchers) w.stop();
      return;
    }
    this.watchers = watchers;
    this.follow(watchers[0], this.byHash, "token watch ended");
    this.follow(watchers[1], this.byMember, "membership watch ended");
  }

  private follow(watcher: QueuedIterator<KvWatchEntry>, index: Map<string, Set<Revocable>>, ended: string): void {
    void (async () => {
      for await (const e of watcher) for (const r of [...(index.get(e.key) ?? [])]) this.recheck(r);
    })().catch((err: unknown) => {
      if (!this.stopped) this.ctx.deps.log.error({ err }, ended);
      // The next ready() starts both again; the other watch is stopped so none is left behind.
      for (const w of this.watchers) w.stop();
      this.watchers = [];
      this.starting = undefined;
    });
  }

  /**
   * Registers a stream, then re-checks it once: together with the watches
   * (running before this is called) no change between the check that opened
   * the stream and now can be missed.
   */
  add(r: Revocable, principal: Principal, reauthorize: Reauthorize): void {
    this.streams.set(r, { principal, reauthorize });
    index(this.byHash, r.tokenHash, r);
    index(this.byMember, memberKey(principal.scope.workspaceId, principal.scope.actor.id), r);
    this.arm(r, principal.expiresAt);
    this.recheck(r);
  }

  remove(r: Revocable): void {
    const g = this.streams.get(r);
    if (!g) return;
    g.cancelExpiry?.();
    this.streams.delete(r);
    unindex(this.byHash, r.tokenHash, r);
    unindex(this.byMember, memberKey(g.principal.scope.workspaceId, g.principal.scope.actor.id), r);
  }

  /** Streams registered now (tests wait on it rather than on time). */
  get size(): number {
    return this.streams.size;
  }

  private arm(r: Revocable, expiresAt: number | undefined): void {
    const g = this.streams.get(r);
    if (!g) return;
    g.cancelExpiry?.();
    g.cancelExpiry = undefined;
    if (expiresAt === undefined) return;
    const fire = () => {
      if (!this.streams.has(r)) return;
      if (this.ctx.deps.now() >= expiresAt) this.close(r, "token expired");
      else g.cancelExpiry = this.ctx.after(expiresAt - this.ctx.deps.now(), fire);
    };
    g.cancelExpiry = this.ctx.after(Math.max(0, expiresAt - this.ctx.deps.now()), fire);
  }

  /** Re-reads the stream's token and re-runs its authorization; closes it when either fails. */
  private recheck(r: Revocable): void {
    const g = this.streams.get(r);
    if (!g) return;
    const { scope } = g.principal;
    void (async () => {
      const now = await this.ctx.principalOfHash(r.tokenHash);
      if (now.scope.workspaceId !== scope.workspaceId || now.scope.actor.id !== scope.actor.id) throw new UnauthenticatedError();
      this.arm(r, now.expiresAt);
      // A fresh scope object: the Authorizer must not reuse a membership read made for the opening request.
      await g.reauthorize({ ...now.scope });
    })().catch((err: unknown) => {
      if (!(err instanceof PaddockError)) this.ctx.deps.log.error({ err }, "stream re-check failed");
      const reason =
        err instanceof TokenExpiredError ? "token expired" : err instanceof UnauthenticatedError ? "token revoked" : err instanceof PaddockError && err.code !== "unavailable" ? "access revoked" : "access could not be re-checked";
      this.close(r, reason);
    });
  }

  private close(r: Revocable, reason: string): void {
    if (!this.streams.has(r)) return;
    this.remove(r);
    r.revoke(reason);
  }

  stop(): void {
    this.stopped = true;
    for (const w of this.watchers) w.stop();
    for (const g of this.streams.values()) g.cancelExpiry?.();
    this.streams.clear();
    this.byHash.clear();
    this.byMember.clear();
  }
}

function index(map: Map<string, Set<Revocable>>, key: string, r: Revocable): void {
  let set = map.get(key);
  if (!set) map.set(key, (set = new Set()));
  set.add(r);
}

function unindex(map: Map<string, Set<Revocable>>, key: string, r: Revocable): void {
  const set = map.get(key);
  set?.delete(r);
  if (set?.size === 0) map.delete(key);
}
