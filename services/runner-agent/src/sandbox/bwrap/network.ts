/**
 * Per-session networks (decision 0042): each session gets a network namespace
 * of its own whose only link is one end of a veth pair; the other end is in
 * the runner's namespace with a /30 of its own. The namespace has no default
 * route, so the only address it can reach is the runner-side end of its own
 * link, and there one nftables table lets through only the (interface,
 * address, port) triples the runner allowed — its gateway relay and its
 * egress proxy listening on that address. Everything else arriving from a
 * session's interface is dropped (IPv6 and every other port included), and
 * nothing is forwarded to or from a session's interface, so a session reaches
 * neither other host ports (NATS) nor another session.
 *
 * The namespace is made by root and owned by the host's user namespace: the
 * session (an unprivileged uid in a child user namespace) has no
 * CAP_NET_ADMIN or CAP_NET_RAW over it, so it can change neither addresses,
 * routes nor interfaces, nor forge packets.
 *
 * The runner reaches a session's ports at the session's end of the link
 * (previews, decision 0052): inside the namespace, connections arriving on
 * its link are sent to its loopback (DNAT with route_localnet), so a dev
 * server listening on 127.0.0.1 only is reached too. Only the runner's own
 * uid may open a connection into a session (its table's output chain): no
 * other process of the host reaches a session's loopback that way.
 *
 * No process runs per session: the cost is three `ip` runs (one of them
 * running the namespace's `nft`) and one `nft` run at create, one of each
 * at destroy, and the kernel's veth pair.
 */
import { execFile } from "node:child_process";
import { readdir } from "node:fs/promises";
import { promisify } from "node:util";

const execFileAsync = promisify(execFile);
const COMMAND_TIMEOUT_MS = 10_000;
const NETNS_DIR = "/run/netns";

export interface SandboxNetworksOptions {
  ip: string;
  nft: string;
  /**
   * This runner's short name on the host (1-4 of [a-z0-9]): it names the
   * nftables table, the namespaces and the interfaces, so runners sharing a
   * host do not collide.
   */
  instance: string;
  /** The first two octets of the IPv4 /16 the sessions' /30 links are cut from (10.213 by default). */
  prefix?: readonly [number, number];
  /**
   * Ports every session may reach on the runner side of its own link: one
   * runner-wide listener (on all addresses) per port, telling sessions apart
   * by their link address. Sessions reach no other address of the host (no
   * route), so no per-session rule is needed and a session's setup runs no
   * `nft` at all. Per-session ports go through `allow`.
   */
  sharedPorts?: readonly number[];
  /** The only uid whose connections into sessions are let through (the runner's). */
  ownerUid?: number;
}

export interface SessionNetwork {
  /** Pass to launch.ts's `netnsPath`. */
  readonly netnsPath: string;
  /** The runner's end: what the session may reach, on the allowed ports only. Listen here. */
  readonly hostAddress: string;
  readonly sandboxAddress: string;
  readonly hostInterface: string;
  /** Lets the session reach hostAddress:port for each port (the runner's listeners there). */
  allow(ports: readonly number[]): Promise<void>;
  /** Removes the namespace, the veth pair and the session's allowed ports. */
  destroy(): Promise<void>;
}

export interface SandboxNetworks {
  /** Installs this runner's nftables table and removes namespaces a previous process left. */
  start(): Promise<void>;
  /** Builds the network of the session holding slot (uid-allocator.ts). */
  create(slot: number): Promise<SessionNetwork>;
  /** Removes the table (sessions' namespaces are destroyed by their owners first). */
  stop(): Promise<void>;
}

export class SandboxNetworkError extends Error {
  readonly code = "sandbox_network";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SandboxNetworkError";
  }
}

/** How many /30 links a /16 holds. */
export const MAX_SLOTS = 16_384;

export function createSandboxNetworks(opts: SandboxNetworksOptions): SandboxNetworks {
  if (!/^[a-z0-9]{1,4}$/.test(opts.instance)) throw new SandboxNetworkError("instance must be 1-4 of [a-z0-9]");
  const [a, b] = opts.prefix ?? [10, 213];
  const table = `paddock_${opts.instance}`;
  const ifPrefix = `pk${opts.instance}-`;
  const nsPrefix = `paddock-${opts.instance}-`;
  const ip = (args: string[], input?: string) => runTool(opts.ip, args, input);
  const nft = (script: string) => runTool(opts.nft, ["-f", "-"], script);
  return {
    async start() {
      await removeLeftoverNamespaces(nsPrefix, ip);
      for (const p of opts.sharedPorts ?? []) assertPort(p);
      await nft(rulesetScript(table, ifPrefix, opts.sharedPorts ?? [], opts.ownerUid));
    },
    async create(slot) {
      if (!Number.isInteger(slot) || slot < 0 || slot >= MAX_SLOTS) throw new SandboxNetworkError(`slot out of range: ${slot}`);
      const base = slot * 4;
      const net = `${a}.${b}.${base >> 8}`;
      const hostAddress = `${net}.${(base & 255) + 1}`;
      const sandboxAddress = `${net}.${(base & 255) + 2}`;
      const hostInterface = `${ifPrefix}${slot}`;
      const name = `${nsPrefix}${slot}`;
      await ip(["-b", "-"], [`netns add ${name}`, `link add ${hostInterface} type veth peer name eth0 netns ${name}`, `addr add ${hostAddress}/30 dev ${hostInterface}`, `link set ${hostInterface} up`].join("\n"));
      await ip(["-n", name, "-b", "-"], ["link set lo up", `addr add ${sandboxAddress}/30 dev eth0`, "link set eth0 up"].join("\n"));
      // route_localnet lets the DNAT to 127.0.0.1 route; sh writes it, then becomes the namespace's nft.
      await ip(["netns", "exec", name, "sh", "-c", `echo 1 > /proc/sys/net/ipv4/conf/eth0/route_localnet && exec ${opts.nft} -f -`], insideScript(sandboxAddress));
      const allowed: number[] = [];
      const elements = (ports: readonly number[]) => ports.map((p) => `"${hostInterface}" . ${hostAddress} . ${p}`).join(", ");
      return {
        netnsPath: `${NETNS_DIR}/${name}`,
        hostAddress,
        sandboxAddress,
        hostInterface,
        async allow(ports) {
          for (const p of ports) assertPort(p);
          if (ports.length === 0) return;
          await nft(`add element inet ${table} allowed { ${elements(ports)} }`);
          allowed.push(...ports);
        },
        async destroy() {
          if (allowed.length > 0) await nft(`delete element inet ${table} allowed { ${elements(allowed.splice(0))} }`);
          // The veth pair goes with the namespace once no process is left in it; deleting the host end makes it go now.
          await ip(["link", "del", hostInterface]).catch(() => undefined);
          await ip(["netns", "del", name]);
        },
      };
    },
    async stop() {
      await nft(`delete table inet ${table}`).catch(() => undefined);
    },
  };
}

/**
 * The runner's table. `priority filter - 10` runs it before the usual filter
 * chains; a drop here is final whatever other tables accept. Replies to
 * connections the host opened into a session are let back in. A refused TCP
 * connection is reset (the session's client fails at once, as with a closed
 * port) rather than left to time out.
 */
export function rulesetScript(table: string, ifPrefix: string, sharedPorts: readonly number[] = [], ownerUid?: number): string {
  const shared = sharedPorts.length > 0 ? ` elements = { ${sharedPorts.join(", ")} };` : "";
  const owner = ownerUid === undefined ? "" : `
  chain output {
    type filter hook output priority filter - 10; policy accept;
    oifname "${ifPrefix}*" ct state new meta skuid != ${ownerUid} meta l4proto tcp reject with tcp reset
    oifname "${ifPrefix}*" ct state new meta skuid != ${ownerUid} drop
  }`;
  return `add table inet ${table}
delete table inet ${table}
table inet ${table} {
  set allowed { type ifname . ipv4_addr . inet_service; }
  set shared { type inet_service;${shared} }
  chain input {
    type filter hook input priority filter - 10; policy accept;
    iifname "${ifPrefix}*" ct state established,related accept
    iifname "${ifPrefix}*" meta nfproto ipv4 meta l4proto tcp iifname . ip daddr . tcp dport @allowed accept
    iifname "${ifPrefix}*" meta nfproto ipv4 meta l4proto tcp tcp dport @shared accept
    iifname "${ifPrefix}*" meta l4proto tcp reject with tcp reset
    iifname "${ifPrefix}*" drop
  }
  chain forward {
    type filter hook forward priority filter - 10; policy accept;
    iifname "${ifPrefix}*" drop
    oifname "${ifPrefix}*" drop
  }${owner}
}
`;
}

/** The session namespace's own table: connections to its address from its link go to its loopback, port kept. */
export function insideScript(sandboxAddress: string): string {
  return `table ip paddock_ports {
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "eth0" ip daddr ${sandboxAddress} meta l4proto tcp dnat to 127.0.0.1
  }
}
`;
}

function assertPort(p: number): void {
  if (!Number.isInteger(p) || p <= 0 || p > 65_535) throw new SandboxNetworkError(`not a port: ${p}`);
}

/** Removes the namespaces a previous runner process left (named with nsPrefix). */
export async function removeLeftoverNamespaces(nsPrefix: string, ip: (args: string[], input?: string) => Promise<string>): Promise<void> {
  const leftovers = async () => (await readdir(NETNS_DIR).catch(() => [] as string[])).filter((n) => n.startsWith(nsPrefix));
  const found = await leftovers();
  if (found.length === 0) return;
  try {
    // -force: every line is tried, whatever an earlier one answered.
    await ip(["-force", "-b", "-"], found.map((n) => `netns del ${n}`).join("\n"));
  } catch (err) {
    // A namespace gone between the listing and its deletion (a previous runner process still ending removed it)
    // fails the batch: only one that is still there is an error.
    if ((await leftovers()).some((n) => found.includes(n))) throw err;
  }
}

async function runTool(file: string, args: string[], input?: string): Promise<string> {
  const child = execFileAsync(file, args, { timeout: COMMAND_TIMEOUT_MS });
  if (input !== undefined) child.child.stdin?.end(input);
  try {
    return (await child).stdout;
  } catch (err) {
    const stderr = ((err as { stderr?: string }).stderr ?? "").split("\n").find(Boolean) ?? "";
    throw new SandboxNetworkError(`${file.split("/").pop()} ${args.join(" ")}: ${stderr.slice(0, 200)}`, { cause: err });
  }
}
