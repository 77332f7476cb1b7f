/**
 * A runner's network instance, claimed host-wide when its config names none.
 * The instance names the runner's nftables table, namespaces and interfaces
 * and its prefix numbers their addresses (network.ts): two runners on one
 * host (a test stack's three, a developer's `up` beside a CI run) must not
 * share either. A claim is the file `<claimDir>/<n>` naming the claiming pid,
 * made exclusively like a uid's (uid-allocator.ts); a claim whose pid is gone
 * is taken over, and the new holder's `networks.start()` removes what the
 * dead one left under the same names.
 */
import { mkdirSync } from "node:fs";
import { claimUid, releaseUid } from "./uid-allocator.ts";

export const DEFAULT_NET_CLAIM_DIR = "/run/paddock/net";
/** How many runners one host can hold without configured instances: instance `h<n>`, prefix 10.(100+n). */
export const CLAIMABLE_INSTANCES = 64;
const FIRST_SECOND_OCTET = 100;

export interface NetInstance {
  instance: string;
  prefix: readonly [number, number];
  /** Drops the claim (after the runner's networks are gone). */
  release(): void;
}

export class NetInstanceError extends Error {
  readonly code = "net_instance";
  constructor(message: string) {
    super(message);
    this.name = "NetInstanceError";
  }
}

/**
 * The configured instance and prefix as they are, or else the lowest free
 * instance of the host. A configured prefix is kept with a claimed instance.
 */
export function resolveNetInstance(configured: { instance?: string | undefined; prefix?: readonly [number, number] | undefined }, claimDir = DEFAULT_NET_CLAIM_DIR): NetInstance {
  if (configured.instance !== undefined) return { instance: configured.instance, prefix: configured.prefix ?? [10, 213], release: () => undefined };
  mkdirSync(claimDir, { recursive: true, mode: 0o700 });
  for (let n = 0; n < CLAIMABLE_INSTANCES; n++) {
    if (!claimUid(claimDir, n, () => false)) continue;
    return { instance: `h${n}`, prefix: configured.prefix ?? [10, FIRST_SECOND_OCTET + n], release: () => releaseUid(claimDir, n) };
  }
  throw new NetInstanceError(`all ${CLAIMABLE_INSTANCES} network instances of this host are claimed (${claimDir}); set PADDOCK_SANDBOX_NET_INSTANCE`);
}
