import { KvWatchInclude, type KvWatchEntry } from "@nats-io/kv";
import type { QueuedIterator } from "@nats-io/transport-node";
import { PaddockError } from "@paddock/contracts";
import type { GatewayContext } from "./context.ts";

/** An open socket that dies with its token. */
export interface Revocable {
  readonly tokenHash: string;
  /** Closes the socket with CLOSE_REVOKED. */
  revoke(reason: string): void;
}

/**
 * Keeps open terminal sockets honest about their token: one watch on the
 * token records of KV `tokens` (keys `*`: bare hashes; tickets and the id
 * index are deeper keys) re-reads the record of any changed token that has
 * sockets here; a deleted, purged, expired or unreadable one closes them. An
 * expiry timer (injected `after`, re-checked on the injected clock) closes
 * them when the token expires.
 */
export class TokenGuard {
  private readonly byHash = new Map<string, Set<Revocable>>();
  private readonly timers = new Map<Revocable, () => void>();
  private starting: Promise<void> | undefined;
  private watcher: QueuedIterator<KvWatchEntry> | undefined;
  private stopped = false;

  constructor(private readonly ctx: GatewayContext) {}

  /** Resolves once the watch runs: a change after this is seen. Call before authenticating an upgrade. */
  ready(): Promise<void> {
    this.starting ??= this.start().catch((err: unknown) => {
      this.starting = undefined;
      throw err;
    });
    return this.starting;
  }

  private async start(): Promise<void> {
    const kv = await this.ctx.tokens();
    const watcher = await kv.watch({ key: "*", include: KvWatchInclude.UpdatesOnly });
    if (this.stopped) {
      watcher.stop();
      return;
    }
    this.watcher = watcher;
    void (async () => {
      for await (const e of watcher) if (this.byHash.has(e.key)) this.recheck(e.key);
    })().catch((err: unknown) => {
      if (!this.stopped) this.ctx.deps.log.error({ err }, "token watch ended");
      this.starting = undefined;
      this.watcher = undefined;
    });
  }

  /**
   * Registers a socket, then re-reads its token once: together with the watch
   * (started before authentication) no revocation between the check at the
   * upgrade and now can be missed.
   */
  add(r: Revocable, expiresAt: number | undefined): void {
    let set = this.byHash.get(r.tokenHash);
    if (!set) this.byHash.set(r.tokenHash, (set = new Set()));
    set.add(r);
    this.arm(r, expiresAt);
    this.recheck(r.tokenHash);
  }

  remove(r: Revocable): void {
    this.timers.get(r)?.();
    this.timers.delete(r);
    const set = this.byHash.get(r.tokenHash);
    set?.delete(r);
    if (set?.size === 0) this.byHash.delete(r.tokenHash);
  }

  private arm(r: Revocable, expiresAt: number | undefined): void {
    this.timers.get(r)?.();
    this.timers.delete(r);
    if (expiresAt === undefined) return;
    const fire = () => {
      if (this.ctx.deps.now() >= expiresAt) {
        this.timers.delete(r);
        r.revoke("token expired");
      } else {
        this.timers.set(r, this.ctx.after(expiresAt - this.ctx.deps.now(), fire));
      }
    };
    this.timers.set(r, this.ctx.after(Math.max(0, expiresAt - this.ctx.deps.now()), fire));
  }

  /** Re-reads one token; closes its sockets when it no longer authenticates, re-arms expiry when it does. */
  private recheck(tokenHash: string): void {
    this.ctx.principalOfHash(tokenHash).then(
      (p) => {
        for (const r of this.byHash.get(tokenHash) ?? []) this.arm(r, p.expiresAt);
      },
      (err: unknown) => {
        const expired = err instanceof PaddockError && err.message === "token expired";
        if (!(err instanceof PaddockError)) this.ctx.deps.log.error({ err }, "token re-check failed");
        for (const r of [...(this.byHash.get(tokenHash) ?? [])]) r.revoke(expired ? "token expired" : "token revoked");
      },
    );
  }

  stop(): void {
    this.stopped = true;
    this.watcher?.stop();
    for (const cancel of this.timers.values()) cancel();
    this.timers.clear();
  }
}
