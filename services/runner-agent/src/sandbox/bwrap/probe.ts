/**
 * What this host offers the bwrap backend, found once at start: whether a
 * trivial sandbox with every namespace the backend uses really runs (as an
 * unprivileged session uid, through the same exec chain as a session), the
 * rlimits the runner may hand out, where it can make per-session cgroups
 * (cgroup-probe.ts: a delegated v2 subtree or writable v1 hierarchies), and
 * whether it can build per-session networks (network.ts).
 */
import { execFile } from "node:child_process";
import { accessSync, chmodSync, constants as fsConstants, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { promisify } from "node:util";
import { probeCgroup, type CgroupCapability } from "./cgroup-probe.ts";
import { sandboxLaunch, type BwrapTools } from "./launch.ts";
import { hostRoot } from "./host-root.ts";

const run = promisify(execFile);
const PROBE_TIMEOUT_MS = 5_000;

export interface HostRlimits {
  /** Hard limits of the runner's own process ("unlimited" as Infinity): a session's limit may not exceed them. */
  processes: number;
  openFiles: number;
  fileSizeBytes: number;
}

export interface BwrapCapability {
  /** Whether a sandbox (user, pid, mount, net, ipc, uts namespaces; as an unprivileged uid) ran here. */
  works: boolean;
  /** Why not (a short reason: a missing tool, or bwrap's first error line). */
  reason: string | undefined;
  version: string | undefined;
  tools: BwrapTools | undefined;
  rlimits: HostRlimits;
  cgroup: CgroupCapability;
  /** Per-session network namespaces with a veth pair and nftables rules (needs root, `ip` and `nft`). */
  network: { works: boolean; ip: string | undefined; nft: string | undefined; reason: string | undefined };
}

export interface ProbeOptions {
  /** The uid/gid the trivial sandbox runs as: one the runner may give sessions, unused now. */
  uid: number;
  gid: number;
  /** Where to look for tools (the runner's PATH, from its config). */
  path: string;
}

/** Finds an executable on path the way execvp would; undefined when absent. */
export function findTool(name: string, path: string): string | undefined {
  for (const dir of path.split(delimiter).filter(Boolean)) {
    const file = join(dir, name);
    try {
      accessSync(file, fsConstants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

export async function probeBwrap(opts: ProbeOptions): Promise<BwrapCapability> {
  const path = opts.path;
  const found = { bwrap: findTool("bwrap", path), nsenter: findTool("nsenter", path), prlimit: findTool("prlimit", path), setpriv: findTool("setpriv", path), sh: findTool("sh", path) };
  const missing = Object.entries(found).filter(([, file]) => !file).map(([name]) => name);
  // bash is optional: it closes descriptors the runner did not mean to pass on (launch.ts).
  const tools = missing.length === 0 ? ({ ...found, bash: findTool("bash", path) } as BwrapTools) : undefined;
  const ip = findTool("ip", path);
  const nft = findTool("nft", path);
  const rlimits = hostRlimits();
  const cgroup = probeCgroup();
  const network = networkCapability(ip, nft);
  if (!tools) return { works: false, reason: `missing: ${missing.join(", ")}`, version: undefined, tools, rlimits, cgroup, network };
  const version = await run(tools.bwrap, ["--version"], { timeout: PROBE_TIMEOUT_MS }).then(
    (r) => r.stdout.trim().replace(/^bubblewrap /, ""),
    () => undefined,
  );
  const reason = await trySandbox(tools, opts);
  return { works: reason === undefined, reason, version, tools, rlimits, cgroup, network };
}

/** Runs `true` in a sandbox built like a session's; answers why it failed, or undefined. */
async function trySandbox(tools: BwrapTools, opts: ProbeOptions): Promise<string | undefined> {
  const empty = mkdtempSync(join(tmpdir(), "paddock-probe-"));
  // The probe uid binds it: readable by anyone, writable by no one but root.
  chmodSync(empty, 0o755);
  try {
    return await runTrivial(tools, opts, empty);
  } finally {
    rmSync(empty, { recursive: true, force: true });
  }
}

async function runTrivial(tools: BwrapTools, opts: ProbeOptions, empty: string): Promise<string | undefined> {
  const launch = sandboxLaunch(
    {
      sessionId: "probe",
      uid: opts.uid,
      gid: opts.gid,
      root: hostRoot(),
      workspace: { host: empty, path: "/home/probe-workspace" },
      home: { host: empty, path: "/home/probe-home" },
      tmpDir: empty,
      hide: [],
      env: {},
      cwd: "/",
      command: [tools.sh, "-c", "exit 0"],
      rlimits: { processes: 64, openFiles: 64, fileSizeBytes: 1 << 20 },
      tty: false,
    },
    tools,
  );
  try {
    await run(launch.file, launch.args, { env: launch.env, timeout: PROBE_TIMEOUT_MS });
    return undefined;
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr ?? "";
    return (stderr.split("\n").find(Boolean) ?? (err as Error).message).slice(0, 200);
  }
}

/** The runner's hard rlimits, from /proc/self/limits. */
export function hostRlimits(limitsText = readFileSync("/proc/self/limits", "utf8")): HostRlimits {
  const hard = (label: string): number => {
    const line = limitsText.split("\n").find((l) => l.startsWith(label));
    const value = line?.slice(label.length).trim().split(/\s+/)[1];
    return value === undefined || value === "unlimited" ? Infinity : Number(value);
  };
  return { processes: hard("Max processes"), openFiles: hard("Max open files"), fileSizeBytes: hard("Max file size") };
}

/** Capabilities (linux/capability.h bit numbers) that per-session networks need: named namespaces are bind mounts, veths and nft are net admin. */
const NETWORK_CAPABILITIES = { CAP_SYS_ADMIN: 21, CAP_NET_ADMIN: 12 } as const;

/**
 * Whether the runner can build per-session networks: the tools, and the
 * capabilities in its effective set (root has them; a runner of its own user
 * holds them as ambient ones, decision 0043).
 */
export function networkCapability(ip: string | undefined, nft: string | undefined, statusText = readFileSync("/proc/self/status", "utf8")): BwrapCapability["network"] {
  const effective = BigInt(`0x${/^CapEff:\s+([0-9a-f]+)$/m.exec(statusText)?.[1] ?? "0"}`);
  const lackingCaps = Object.entries(NETWORK_CAPABILITIES).filter(([, bit]) => ((effective >> BigInt(bit)) & 1n) === 0n).map(([name]) => name);
  const lacking = [ip ? "" : "ip (iproute2)", nft ? "" : "nft (nftables)", ...lackingCaps].filter(Boolean);
  return { works: lacking.length === 0, ip, nft, reason: lacking.length > 0 ? `missing: ${lacking.join(", ")}` : undefined };
}
