/**
 * Session networks made ahead of time. Building one (a namespace, a veth
 * pair, addresses) takes a few process runs and kernel work, tens of ms on a
 * loaded host, and tearing one down as much again: too slow for a create's
 * path to running. The pool keeps `size` networks ready; a session takes one
 * (allowing its ports then is one `nft` run), and a released one is destroyed
 * in the background before its slot is used again.
 *
 * A network's slot numbers its addresses and interface only; it is not the
 * session's uid slot. A network that served one session never serves another.
 */
import type { SandboxNetworks, SessionNetwork } from "./network.ts";
import { MAX_SLOTS } from "./network.ts";

export interface NetworkPoolOptions {
  networks: SandboxNetworks;
  /** How many ready networks to keep. */
  size: number;
  /** How many slots the pool may use (ready + taken + being destroyed); MAX_SLOTS at most. */
  slots: number;
  /** Told when a background build or teardown fails (the pool keeps going with what it has). */
  onError: (err: unknown) => void;
  /** Told how many builds and teardowns are under way whenever that changes (a gauge: their kernel work competes with sessions). */
  onWork?: (underWay: number) => void;
}

export interface NetworkPool {
  /** Resolves once `size` networks are ready (or a build failed). */
  filled(): Promise<void>;
  /** A ready network (built now if none is ready). */
  take(): Promise<SessionNetwork>;
  /** Destroys a network a session is done with; its slot is reused after. */
  release(net: SessionNetwork): void;
  /** Resolves once no build or teardown is under way. */
  idle(): Promise<void>;
  /** Destroys the ready networks and waits for the teardowns under way. */
  stop(): Promise<void>;
  readonly readyCount: number;
}

export function createNetworkPool(opts: NetworkPoolOptions): NetworkPool {
  const slots = Math.min(opts.slots, MAX_SLOTS);
  const free: number[] = Array.from({ length: slots }, (_, i) => i);
  const slotOf = new Map<SessionNetwork, number>();
  const ready: SessionNetwork[] = [];
  const pending = new Set<Promise<unknown>>();
  let building = 0;
  let stopped = false;
  let waiters: (() => void)[] = [];

  const track = <T>(p: Promise<T>): Promise<T> => {
    pending.add(p);
    opts.onWork?.(pending.size);
    void p
      .finally(() => {
        pending.delete(p);
        opts.onWork?.(pending.size);
      })
      .catch(() => undefined);
    return p;
  };
  const wake = () => {
    if (ready.length >= opts.size || building === 0) for (const w of waiters.splice(0)) w();
  };
  const build = async (): Promise<SessionNetwork> => {
    const slot = free.shift();
    if (slot === undefined) throw new Error("no free network slot");
    try {
      const net = await opts.networks.create(slot);
      slotOf.set(net, slot);
      return net;
    } catch (err) {
      free.push(slot);
      throw err;
    }
  };
  const refill = () => {
    while (!stopped && ready.length + building < opts.size && free.length > 0) {
      building++;
      void track(build())
        .then(
          (net) => (stopped ? destroy(net) : void ready.push(net)),
          (err: unknown) => opts.onError(err),
        )
        .finally(() => {
          building--;
          wake();
        });
    }
    wake();
  };
  const destroy = (net: SessionNetwork): Promise<void> =>
    track(
      net.destroy().then(
        () => {
          const slot = slotOf.get(net);
          slotOf.delete(net);
          if (slot !== undefined) free.push(slot);
          refill();
        },
        (err: unknown) => opts.onError(err),
      ),
    );

  refill();
  return {
    filled: () => (ready.length >= opts.size || building === 0 ? Promise.resolve() : new Promise<void>((resolve) => waiters.push(resolve))),
    async take() {
      const net = ready.shift() ?? (await build());
      // Spawning the next build's `ip` blocks the event loop for a moment: not before the caller has its network.
      setImmediate(refill);
      return net;
    },
    release(net) {
      void destroy(net);
    },
    async idle() {
      while (pending.size > 0) await Promise.allSettled([...pending]);
    },
    async stop() {
      stopped = true;
      for (const net of ready.splice(0)) void destroy(net);
      while (pending.size > 0) await Promise.allSettled([...pending]);
      waiters = [];
    },
    get readyCount() {
      return ready.length;
    },
  };
}
