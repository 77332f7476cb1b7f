/**
 * Where a service may send a request a user chose the address of (webhooks):
 * not to this host, the private network it sits in, or the cloud's metadata
 * address — the classic server-side request forgery targets — unless the
 * operator allows private targets. Names are checked by what they resolve to,
 * at registration and again at every connection (`guardedLookup` is the
 * socket's own lookup, so a name that resolves elsewhere later — DNS
 * rebinding — is caught where the connection is made, on the address used).
 */
import { BlockList, isIP } from "node:net";
import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions, type LookupOptions } from "node:dns";
import { InvalidError } from "@paddock/contracts";

const blocked = new BlockList();
for (const [net, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.88.99.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const)
  blocked.addSubnet(net, prefix, "ipv4");
for (const [net, prefix] of [
  ["::", 128],
  ["::1", 128],
  ["64:ff9b::", 96],
  ["64:ff9b:1::", 48],
  ["100::", 64],
  ["2001::", 23],
  ["2001:db8::", 32],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
] as const)
  blocked.addSubnet(net, prefix, "ipv6");

/** Whether ip is a public unicast address (an IPv4-mapped IPv6 address is judged as its IPv4 one). */
export function isPublicAddress(ip: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip)?.[1];
  if (mapped !== undefined) return isPublicAddress(mapped);
  const family = isIP(ip);
  if (family === 0) return false;
  return !blocked.check(ip, family === 4 ? "ipv4" : "ipv6");
}

/** A target that is (or resolves to) an address the guard refuses; the message names the host, never a URL's path or query. */
export class PrivateTargetError extends InvalidError {}

function lookupAll(host: string): Promise<LookupAddress[]> {
  return new Promise((resolve, reject) => dnsLookup(host, { all: true, verbatim: true }, (err, addresses) => (err ? reject(err) : resolve(addresses))));
}

/**
 * Refuses url unless every address its host resolves to is public (or
 * allowPrivate). A name that does not resolve is refused too: it could not
 * be delivered to.
 */
export async function checkOutboundTarget(url: string, allowPrivate: boolean): Promise<void> {
  if (allowPrivate) return;
  const host = new URL(url).hostname.replace(/^\[|\]$/g, "");
  let addresses: LookupAddress[];
  try {
    addresses = isIP(host) ? [{ address: host, family: isIP(host) }] : await lookupAll(host);
  } catch {
    throw new PrivateTargetError(`${host} does not resolve`);
  }
  if (addresses.length === 0 || addresses.some((a) => !isPublicAddress(a.address))) throw new PrivateTargetError(`${host} is (or resolves to) a private, loopback or link-local address`);
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/** A `lookup` for http(s).request that fails a connection to any refused address (all of a name's answers are checked). */
export function guardedLookup(allowPrivate: boolean): (host: string, options: LookupOptions | LookupAllOptions, callback: LookupCallback) => void {
  return (host, options, callback) => {
    dnsLookup(host, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err, []);
      const refused = !allowPrivate && (addresses.length === 0 || addresses.some((a) => !isPublicAddress(a.address)));
      if (refused) return callback(Object.assign(new PrivateTargetError(`${host} resolves to a refused address`), { code: "EPRIVATE" }), []);
      if ((options as LookupAllOptions).all) return callback(null, addresses);
      const first = addresses[0] as LookupAddress;
      callback(null, first.address, first.family);
    });
  };
}
