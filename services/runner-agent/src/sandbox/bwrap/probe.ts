/**
 * What this host offers the bwrap backend, found once at start: whether a
 * trivial sandbox with every namespace the backend uses really runs (as an
 * unprivileged session uid, through the same exec chain as a session), the
 * rlimits the runner may hand out, whether a cgroup v2 subtree is delegated
 * to it, and whether it can build per-session networks (network.ts).
 */
import { execFile } from "node:child_process";
import { accessSync, chmodSync, constants as fsConstants, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { promisify } from "node:util";
import { sandboxLaunch, type BwrapTools } from "./launch.ts";

const run = promisify(execFile);
const PROBE_TIMEOUT_MS = 5_000;

export interface HostRlimits {
  /** Hard limits of the runner's own process ("unlimited" as Infinity): a session's limit may not exceed them. */
  processes: number;
  openFiles: number;
  fileSizeBytes: number;
}

export interface CgroupCapability {
  /** Where cgroup2 is mounted, if anywhere. */
  mount: string | undefined;
  /** The runner's own cgroup v2 directory. */
  dir: string | undefined;
  /** Controllers available in that directory (cgroup.controllers). */
  controllers: string[];
  /** Whether memory, cpu and pids can be used for sessions: the directory is writable and offers all three. */
  delegated: boolean;
  /** Why not, when not delegated. */
  reason: string | undefined;
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
      root: { kind: "host" },
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

const NEEDED_CONTROLLERS = ["memory", "cpu", "pids"] as const;

/** Finds the runner's cgroup v2 directory and whether memory, cpu and pids are delegated to it. */
export function probeCgroup(mountinfo = readText("/proc/self/mountinfo"), ownCgroup = readText("/proc/self/cgroup")): CgroupCapability {
  const mount = mountinfo
    .split("\n")
    .map((l) => l.split(" "))
    .find((f) => f[f.indexOf("-") + 1] === "cgroup2")?.[4];
  const rel = ownCgroup
    .split("\n")
    .find((l) => l.startsWith("0::"))
    ?.slice(3);
  if (!mount || rel === undefined) return { mount, dir: undefined, controllers: [], delegated: false, reason: "no cgroup v2 hierarchy mounted" };
  const dir = join(mount, rel);
  const controllers = readText(join(dir, "cgroup.controllers")).split(/\s+/).filter(Boolean);
  const lacking = NEEDED_CONTROLLERS.filter((c) => !controllers.includes(c));
  if (lacking.length > 0) return { mount, dir, controllers, delegated: false, reason: `controllers not available to the runner: ${lacking.join(", ")}` };
  try {
    accessSync(dir, fsConstants.W_OK);
  } catch {
    return { mount, dir, controllers, delegated: false, reason: "the runner's cgroup is not writable by it" };
  }
  return { mount, dir, controllers, delegated: true, reason: undefined };
}

function networkCapability(ip: string | undefined, nft: string | undefined): BwrapCapability["network"] {
  const lacking = [ip ? "" : "ip (iproute2)", nft ? "" : "nft (nftables)", process.geteuid?.() === 0 ? "" : "root"].filter(Boolean);
  return { works: lacking.length === 0, ip, nft, reason: lacking.length > 0 ? `missing: ${lacking.join(", ")}` : undefined };
}

function readText(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "";
  }
}
