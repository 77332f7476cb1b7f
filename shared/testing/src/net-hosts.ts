/**
 * Several "hosts" on one machine, for tests of runners that reach NATS and
 * the gateway over a real network path (issue 29 item 5). Each host is a
 * network namespace whose only link is one end of a veth pair; the other end
 * is a port of one bridge in the root namespace, which holds the address
 * every host reaches the root at (its default route). So a service listening
 * on `rootAddress` in the root namespace is reached from every host over its
 * veth, and nothing else of the root namespace is exposed (bind to
 * rootAddress, not 0.0.0.0). `cut` sets a host's root-side veth down: its
 * packets go nowhere in either direction until `restore`, and no route leaks
 * them elsewhere (the subnet's route is the bridge's, which stays up).
 *
 * Addresses: 10.250.N.0/24, N the first third octet no interface of the
 * machine uses. Runner sandboxes cut their links from 10.100-10.163 (claimed
 * instances) and 10.213 (the configured default), and no test uses 10.250.
 *
 * Names (interfaces, namespaces) are `pdh<run>-…`, `<run>` the creating
 * process's pid in base 36 and a sequence digit, so they fit IFNAMSIZ (15)
 * and tell whose they are: creating sweeps those of processes no longer alive
 * (a crashed earlier run) and this process's own not in use, and `destroy`
 * removes everything this run made. Needs root and iproute2
 * (`netHostsUnavailable` says why not).
 */
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";

const NETNS_DIR = "/run/netns";
const SECOND_OCTET = 250;
/** `pdh` + the pid in base 36 (5 wide) + a sequence digit of this process + `-`: at most 11 characters before the host part. */
const NAME = /^pdh([0-9a-z]{5})([0-9a-z])-/;
const HOST_NAME = /^[a-z0-9]{1,4}$/;
/** Prefixes of the NetHosts this process made and has not destroyed: never swept. */
const live = new Set<string>();
let sequence = 0;

export interface NetHost {
  name: string;
  /** The network namespace (`ip netns`) the host's processes run in. */
  netns: string;
  /** The host's own address (its eth0). */
  address: string;
  /** The root-side end of its veth pair (a bridge port): what `cut` sets down. */
  rootInterface: string;
}

export interface NetHosts {
  /** Where every host reaches the root namespace: the bridge's address. */
  rootAddress: string;
  host(name: string): NetHost;
  /** StartServiceOptions.wrap / RunnerOptions.wrap: the service runs inside the host's namespace. */
  wrap(name: string): string[];
  /** Sets the host's root-side veth down: no packet crosses its link either way. */
  cut(name: string): void;
  restore(name: string): void;
  /** Bytes through the host's root-side veth so far (rx: sent by the host; tx: sent to it). */
  counters(name: string): { rx: number; tx: number };
  /** Pids and command lines of the processes running in the host's namespace. */
  processes(name: string): Array<{ pid: number; args: string }>;
  /** Kills what still runs in the hosts' namespaces, removes them, their links and the bridge. */
  destroy(): void;
}

/** Why net hosts cannot be made here (not root, no iproute2); undefined when they can. */
export function netHostsUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return "needs root (ip netns, veth pairs)";
  if (ipBinary() === undefined) return "needs iproute2 (no ip binary)";
  return undefined;
}

function ipBinary(): string | undefined {
  return ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].find((p) => existsSync(p));
}

/** Makes one host per name (1-4 of [a-z0-9]), in order, addresses .10, .11, … of the run's subnet. */
export function createNetHosts(names: readonly string[]): NetHosts {
  const ipPath = ipBinary();
  if (ipPath === undefined) throw new Error("net hosts: no ip binary (install iproute2)");
  for (const n of names) if (!HOST_NAME.test(n)) throw new Error(`net hosts: host name must be 1-4 of [a-z0-9]: ${n}`);
  if (new Set(names).size !== names.length || names.length > 200) throw new Error("net hosts: names must be distinct, at most 200");
  const ip = (args: string[], input?: string): string => execFileSync(ipPath, args, { encoding: "utf8", stdio: ["pipe", "pipe", "pipe"], ...(input !== undefined ? { input } : {}) });
  const prefix = `pdh${process.pid.toString(36).padStart(5, "0")}${(sequence++ % 36).toString(36)}-`;
  sweep(ip);
  live.add(prefix);
  const third = freeThirdOctet(ip);
  const net = `10.${SECOND_OCTET}.${third}`;
  const bridge = `${prefix}br`;
  const hosts = new Map<string, NetHost>(names.map((name, i) => [name, { name, netns: `${prefix}h${name}`, address: `${net}.${10 + i}`, rootInterface: `${prefix}h${name}` }]));
  const made = { bridge: false, hosts: [] as NetHost[] };
  const destroy = (): void => {
    for (const h of made.hosts.splice(0)) removeHost(ip, h.netns, h.rootInterface);
    if (made.bridge) ip(["link", "del", bridge]);
    made.bridge = false;
    live.delete(prefix);
  };
  try {
    // forward_delay 0: a port forwards as soon as it is up (no STP listening/learning), also after restore.
    ip(["-b", "-"], [`link add ${bridge} type bridge forward_delay 0`, `addr add ${net}.1/24 dev ${bridge}`, `link set ${bridge} up`].join("\n") + "\n");
    made.bridge = true;
    for (const h of hosts.values()) {
      ip(["-b", "-"], [`netns add ${h.netns}`, `link add ${h.rootInterface} type veth peer name eth0 netns ${h.netns}`, `link set ${h.rootInterface} master ${bridge}`, `link set ${h.rootInterface} up`].join("\n") + "\n");
      made.hosts.push(h);
      ip(["-n", h.netns, "-b", "-"], ["link set lo up", `addr add ${h.address}/24 dev eth0`, "link set eth0 up", `route add default via ${net}.1`].join("\n") + "\n");
    }
  } catch (err) {
    destroy();
    throw err;
  }
  const host = (name: string): NetHost => {
    const h = hosts.get(name);
    if (!h) throw new Error(`net hosts: no host ${name}`);
    return h;
  };
  const counter = (iface: string, which: "rx_bytes" | "tx_bytes") => Number(readFileSync(`/sys/class/net/${iface}/statistics/${which}`, "utf8").trim());
  return {
    rootAddress: `${net}.1`,
    host,
    wrap: (name) => [ipPath, "netns", "exec", host(name).netns],
    cut: (name) => void ip(["link", "set", host(name).rootInterface, "down"]),
    restore: (name) => void ip(["link", "set", host(name).rootInterface, "up"]),
    counters: (name) => ({ rx: counter(host(name).rootInterface, "rx_bytes"), tx: counter(host(name).rootInterface, "tx_bytes") }),
    processes: (name) => pidsIn(ip, host(name).netns).map((pid) => ({ pid, args: argsOf(pid) })),
    destroy,
  };
}

/** Removes what runs of processes no longer alive left, and this pid's own names not in use (a reused pid's crashed run). */
function sweep(ip: (args: string[]) => string): void {
  const stale = (name: string): boolean => {
    const m = NAME.exec(name);
    if (m === null) return false;
    const pid = parseInt(m[1] ?? "", 36);
    return pid === process.pid ? !live.has(m[0]) : !alive(pid);
  };
  const namespaces = existsSync(NETNS_DIR) ? readdirSync(NETNS_DIR).filter(stale) : [];
  for (const ns of namespaces) removeHost(ip, ns, undefined);
  // `ip -o link` lines read "7: name@peer: <FLAGS> …"; veth ends of removed namespaces went with them.
  const links = ip(["-o", "link", "show"])
    .split("\n")
    .map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1] ?? "")
    .filter(stale);
  for (const link of links) {
    try {
      ip(["link", "del", link]);
    } catch {
      // gone meanwhile (a veth whose peer was just removed)
    }
  }
}

function removeHost(ip: (args: string[]) => string, netns: string, rootInterface: string | undefined): void {
  // A namespace lives on while a process is in it (a runner its test did not stop): end them first.
  for (const pid of pidsIn(ip, netns)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  // Deleting one end of a veth pair deletes both.
  if (rootInterface !== undefined) {
    try {
      ip(["link", "del", rootInterface]);
    } catch {
      // already gone
    }
  }
  ip(["netns", "del", netns]);
}

function pidsIn(ip: (args: string[]) => string, netns: string): number[] {
  try {
    return ip(["netns", "pids", netns])
      .split("\n")
      .filter((l) => /^\d+$/.test(l.trim()))
      .map(Number);
  } catch {
    return [];
  }
}

function argsOf(pid: number): string {
  try {
    return readFileSync(`/proc/${String(pid)}/cmdline`, "utf8").split("\0").join(" ").trim();
  } catch {
    return ""; // exited meanwhile
  }
}

function alive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** A third octet of 10.250.x.0/24 that no interface of the root namespace has an address in (from one the pid picks: two runs starting at once rarely try the same). */
function freeThirdOctet(ip: (args: string[]) => string): number {
  const used = new Set([...ip(["-o", "-4", "addr", "show"]).matchAll(new RegExp(`inet 10\\.${SECOND_OCTET}\\.(\\d+)\\.`, "g"))].map((m) => Number(m[1])));
  for (let i = 0; i < 256; i++) {
    const n = (process.pid + i) % 256;
    if (!used.has(n)) return n;
  }
  throw new Error(`net hosts: every 10.${SECOND_OCTET}.x.0/24 is in use`);
}

/** The inode of a namespace handle (`/run/netns/<name>`), as `readlink /proc/<pid>/ns/net` shows it: `net:[<inode>]`. */
export function netnsInode(netns: string): number {
  return statSync(`${NETNS_DIR}/${netns}`).ino;
}

/**
 * The established IPv4 TCP connections of the network namespace pid runs in
 * (`/proc/<pid>/net/tcp`), as `a.b.c.d:port` pairs.
 */
export function establishedTcp(pid: number): Array<{ local: string; remote: string }> {
  const lines = readFileSync(`/proc/${String(pid)}/net/tcp`, "utf8").split("\n").slice(1);
  const out: Array<{ local: string; remote: string }> = [];
  for (const line of lines) {
    const f = line.trim().split(/\s+/);
    // st 01 is ESTABLISHED.
    if (f.length < 4 || f[3] !== "01") continue;
    out.push({ local: endpoint(f[1] ?? ""), remote: endpoint(f[2] ?? "") });
  }
  return out;
}

/** `0100007F:1F90` (address in host byte order on little-endian machines, port big-endian hex) → `127.0.0.1:8080`. */
function endpoint(hex: string): string {
  const [addr = "", port = ""] = hex.split(":");
  const n = parseInt(addr, 16);
  const octets = [n & 255, (n >>> 8) & 255, (n >>> 16) & 255, (n >>> 24) & 255];
  return `${octets.join(".")}:${String(parseInt(port, 16))}`;
}
