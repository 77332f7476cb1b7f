/**
 * Where the runner can make per-session cgroups, found once at start from
 * /proc/self/mountinfo and /proc/self/cgroup (injected, so the probe is
 * testable over text and a fake file system):
 *
 * - `v2`: a cgroup2 directory delegated to the runner (writable, offering
 *   memory, cpu and pids; a systemd unit with `Delegate=yes`, for one);
 * - `v1`: writable cgroup v1 hierarchies holding memory, pids and cpu (many
 *   container and VM hosts mount them so), each used at the runner's own
 *   directory in it, as /proc/self/cgroup names it;
 * - `none`: neither; sessions then get the rlimits only.
 *
 * v2 is preferred: one directory holds every controller.
 */
import { accessSync, constants as fsConstants, readFileSync } from "node:fs";
import { join } from "node:path";

export const CgroupKind = { v2: "v2", v1: "v1", none: "none" } as const;
export type CgroupKind = (typeof CgroupKind)[keyof typeof CgroupKind];

/** One hierarchy sessions' cgroups are made in. */
export interface CgroupHierarchy {
  /** The runner's own directory in it: sessions' cgroups go below. */
  dir: string;
  /** The controllers it holds that sessions use (v1: `cpuacct` where it is mounted, for usage). */
  controllers: string[];
}

export interface CgroupCapability {
  kind: CgroupKind;
  /** v2: the delegated directory; v1: one per hierarchy holding memory, pids or cpu (a co-mounted `cpu,cpuacct` is one); none: empty. */
  hierarchies: CgroupHierarchy[];
  /** Why not v2 when v1 or none; why neither when none. */
  reason: string | undefined;
}

/** What the probe asks of the file system beyond the two texts. */
export interface CgroupFs {
  read(file: string): string | undefined;
  writable(dir: string): boolean;
}

/** The controllers a session's cgroup must have. */
const NEEDED_CONTROLLERS = ["memory", "pids", "cpu"] as const;
/** v1 only: used where mounted (usage), not needed. */
const OPTIONAL_V1 = ["cpuacct"] as const;

interface CgroupMount {
  type: "cgroup" | "cgroup2";
  /** The mount's root within its hierarchy (a container's may be its own cgroup). */
  root: string;
  point: string;
  /** The super options (v1: the controllers among them). */
  options: string[];
}

export function probeCgroup(mountinfo = readText("/proc/self/mountinfo"), ownCgroup = readText("/proc/self/cgroup"), fs: CgroupFs = hostFs): CgroupCapability {
  const mounts = cgroupMounts(mountinfo);
  const own = ownCgroup.split("\n").flatMap((line) => {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    return m ? [{ controllers: (m[1] ?? "").split(",").filter(Boolean), path: m[2] ?? "" }] : [];
  });
  const v2 = delegatedV2(mounts, own.find((o) => o.controllers.length === 0)?.path, fs);
  if (typeof v2 !== "string") return { kind: CgroupKind.v2, hierarchies: [v2], reason: undefined };
  const v1 = writableV1(mounts, own, fs);
  if (typeof v1 !== "string") return { kind: CgroupKind.v1, hierarchies: v1, reason: `cgroup v2: ${v2}` };
  return { kind: CgroupKind.none, hierarchies: [], reason: `cgroup v2: ${v2}; cgroup v1: ${v1}` };
}

/** The delegated cgroup2 directory, or why there is none. */
function delegatedV2(mounts: CgroupMount[], path: string | undefined, fs: CgroupFs): CgroupHierarchy | string {
  const mount = mounts.find((m) => m.type === "cgroup2");
  if (!mount || path === undefined) return "no cgroup v2 hierarchy mounted";
  const dir = dirIn(mount, path);
  if (!dir) return "the runner's cgroup v2 directory is outside the mount";
  const controllers = (fs.read(join(dir, "cgroup.controllers")) ?? "").split(/\s+/).filter(Boolean);
  const lacking = NEEDED_CONTROLLERS.filter((c) => !controllers.includes(c));
  if (lacking.length > 0) return `controllers not available to the runner: ${lacking.join(", ")}`;
  if (!fs.writable(dir)) return "the runner's cgroup is not writable by it";
  return { dir, controllers: [...NEEDED_CONTROLLERS] };
}

/** The v1 hierarchies holding memory, pids and cpu (and cpuacct where mounted) at the runner's own writable directories, or why not. */
function writableV1(mounts: CgroupMount[], own: Array<{ controllers: string[]; path: string }>, fs: CgroupFs): CgroupHierarchy[] | string {
  const found = new Map<string, CgroupHierarchy>();
  const problems: string[] = [];
  for (const controller of [...NEEDED_CONTROLLERS, ...OPTIONAL_V1]) {
    const line = own.find((o) => o.controllers.includes(controller));
    const mount = line && mounts.find((m) => m.type === "cgroup" && line.controllers.every((c) => m.options.includes(c)));
    const dir = mount && line ? dirIn(mount, line.path) : undefined;
    // A directory without cgroup.procs is not the cgroup /proc/self/cgroup names (a mount showing another subtree).
    const problem = !dir ? "not mounted" : fs.read(join(dir, "cgroup.procs")) === undefined ? "not found" : fs.writable(dir) ? undefined : "not writable";
    if (problem) {
      if ((NEEDED_CONTROLLERS as readonly string[]).includes(controller)) problems.push(`${controller} ${problem}`);
      continue;
    }
    const h = found.get(dir ?? "") ?? { dir: dir ?? "", controllers: [] };
    h.controllers.push(controller);
    found.set(h.dir, h);
  }
  return problems.length > 0 ? problems.join(", ") : [...found.values()];
}

/**
 * The mount's path for a cgroup path of its hierarchy; undefined when the
 * mount does not show it (a container's mount of its own subtree, a path
 * above a cgroup namespace's root, shown with `..`).
 */
function dirIn(mount: CgroupMount, path: string): string | undefined {
  if (!path.startsWith("/") || path.split("/").includes("..")) return undefined;
  const root = mount.root === "/" ? "" : mount.root;
  if (path !== root && !path.startsWith(`${root}/`)) return undefined;
  const dir = join(mount.point, path.slice(root.length));
  return dir.length > 1 ? dir.replace(/\/+$/, "") : dir;
}

function cgroupMounts(mountinfo: string): CgroupMount[] {
  return mountinfo.split("\n").flatMap((line) => {
    // id parent major:minor root mount-point options [optional fields] - type source super-options
    const f = line.split(" ");
    const dash = f.indexOf("-");
    const type = f[dash + 1];
    if (dash < 0 || (type !== "cgroup" && type !== "cgroup2")) return [];
    return [{ type, root: unescapeField(f[3] ?? "/"), point: unescapeField(f[4] ?? ""), options: (f[dash + 3] ?? "").split(",") }];
  });
}

/** mountinfo writes space, tab, newline and backslash in paths as octal escapes. */
function unescapeField(text: string): string {
  return text.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

const hostFs: CgroupFs = {
  read: (file) => {
    try {
      return readFileSync(file, "utf8");
    } catch {
      return undefined;
    }
  },
  writable: (dir) => {
    try {
      accessSync(dir, fsConstants.W_OK);
      return true;
    } catch {
      return false;
    }
  },
};

function readText(file: string): string {
  return hostFs.read(file) ?? "";
}
