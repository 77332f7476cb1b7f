import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { envArgs, HOST_HIDDEN, SandboxSpecError, sandboxLaunch as launchOf, type BwrapTools, type SandboxSpec } from "./launch.ts";

const tools: BwrapTools = { bwrap: "/t/bwrap", nsenter: "/t/nsenter", prlimit: "/t/prlimit", setpriv: "/t/setpriv", sh: "/t/sh" };

function spec(over: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    sessionId: "s1",
    uid: 100_001,
    gid: 100_001,
    root: { kind: "host", entries: [{ name: "bin", kind: "symlink", target: "usr/bin" }, { name: "etc", kind: "bind" }, { name: "usr", kind: "bind" }] },
    workspace: { host: "/data/sessions/s1/workspace", path: "/data/sessions/s1/workspace" },
    home: { host: "/data/sessions/s1/home", path: "/home/session" },
    tmpDir: "/data/sessions/s1/tmp",
    hide: ["/data"],
    netnsPath: "/run/netns/paddock-a-1",
    env: { PATH: "/usr/bin:/bin", PADDOCK_SESSION_TOKEN: "tok-secret" },
    cwd: "/data/sessions/s1/workspace",
    command: ["bash", "-l"],
    rlimits: { processes: 256, openFiles: 1024, fileSizeBytes: 1 << 30 },
    tty: true,
    ...over,
  };
}

const ENV_FROM = "/proc/1234/fd/42";
/** The launch with the environment from ENV_FROM (every session's way). */
const sandboxLaunch = (s: SandboxSpec, t: BwrapTools) => launchOf(s, t, ENV_FROM);
/** The head link's positional arguments: $0, the environment's file, the cgroup directories (none) up to `--`. */
const HEAD_ARGS = ["paddock-launch", ENV_FROM, "--"];

/** The values following each occurrence of flag. */
function after(args: string[], flag: string, n = 1): string[][] {
  return args.flatMap((a, i) => (a === flag ? [args.slice(i + 1, i + 1 + n)] : []));
}

describe("sandboxLaunch", () => {
  it("chains its head (opening the environment), prlimit, nsenter (joining the session's network), setpriv (dropping to its uid) and bwrap in that order, the command last", () => {
    const { file, args } = sandboxLaunch(spec(), tools);
    expect(file).toBe("/t/sh");
    expect(args.slice(0, 1)).toEqual(["-c"]);
    expect(args.slice(2, 5)).toEqual(HEAD_ARGS);
    expect(args.slice(5, 9)).toEqual(["/t/prlimit", "--nproc=256", "--nofile=1024", `--fsize=${1 << 30}`]);
    expect(args.slice(9, 13)).toEqual(["--", "/t/nsenter", "--net=/run/netns/paddock-a-1", "--"]);
    expect(args.slice(13, 21)).toEqual(["/t/setpriv", "--reuid=100001", "--regid=100001", "--clear-groups", "--inh-caps=-all", "--no-new-privs", "--", "/t/bwrap"]);
    expect(args.slice(-3)).toEqual(["--", "bash", "-l"]);
  });

  it("never drops to the session's uid through nsenter: its --setuid keeps inheritable (from root) and ambient (from a non-root runner) capabilities", () => {
    for (const s of [spec(), spec({ netnsPath: undefined })]) {
      const { args } = sandboxLaunch(s, tools);
      expect(args.filter((a) => a.startsWith("--setuid") || a.startsWith("--setgid"))).toEqual([]);
      // Every link after prlimit and before bwrap runs as root; the one that drops also clears every capability set it can.
      const drop = args.indexOf("/t/setpriv");
      expect(drop).toBeGreaterThan(0);
      expect(drop).toBeLessThan(args.indexOf("/t/bwrap"));
      expect(args.slice(drop, args.indexOf("/t/bwrap"))).toEqual(expect.arrayContaining(["--inh-caps=-all", "--clear-groups", "--no-new-privs"]));
    }
  });

  it("without a network of its own, drops through setpriv alone: no groups, no capabilities, no_new_privs", () => {
    const { args } = sandboxLaunch(spec({ netnsPath: undefined }), tools);
    expect(args).not.toContain("/t/nsenter");
    const drop = args.indexOf("/t/setpriv");
    expect(args.slice(drop, drop + 8)).toEqual(["/t/setpriv", "--reuid=100001", "--regid=100001", "--clear-groups", "--inh-caps=-all", "--no-new-privs", "--", "/t/bwrap"]);
  });

  it("spawns the chain with no environment at all, and hands the session's to bwrap alone: cleared, then set from the file", () => {
    const launch = sandboxLaunch(spec(), tools);
    expect(launch.env).toEqual({});
    expect(launch.args.join(" ")).not.toContain("tok-secret");
    const bwrap = launch.args.indexOf("/t/bwrap");
    expect(launch.args.slice(bwrap + 1, bwrap + 4)).toEqual(["--clearenv", "--args", "3"]);
    // The head opens the file as fd 3 (and refuses to go on without it).
    expect(launch.args[1]).toContain('exec 3<"$1" || exit 125');
    expect(envArgs({ PATH: "/usr/bin:/bin", PADDOCK_SESSION_TOKEN: "tok'secret\n" }).toString()).toBe("--setenv\0PATH\0/usr/bin:/bin\0--setenv\0PADDOCK_SESSION_TOKEN\0tok'secret\n\0");
  });

  it("refuses to pass a session's environment through the chain (no file given)", () => {
    expect(() => launchOf(spec(), tools)).toThrow(SandboxSpecError);
    // With nothing to hand over, there is no head and bwrap still clears what the spawn added.
    const bare = launchOf(spec({ env: {} }), tools);
    expect(bare.file).toBe("/t/prlimit");
    expect(bare.args).toContain("--clearenv");
    expect(bare.args).not.toContain("--args");
  });

  it("unshares user, pid, ipc and uts; the network only without a namespace of its own", () => {
    const withNs = sandboxLaunch(spec(), tools).args;
    expect(withNs).toEqual(expect.arrayContaining(["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]));
    expect(withNs).not.toContain("--unshare-net");
    expect(sandboxLaunch(spec({ netnsPath: undefined }), tools).args).toContain("--unshare-net");
  });

  it("starts a new session only without a terminal (a PTY stays the controlling terminal)", () => {
    expect(sandboxLaunch(spec({ tty: true }), tools).args).not.toContain("--new-session");
    expect(sandboxLaunch(spec({ tty: false }), tools).args).toContain("--new-session");
  });

  it("binds the host root read-only entry by entry, hides the host's private dirs and the spec's, then binds the writable dirs over them", () => {
    const { args } = sandboxLaunch(spec(), tools);
    expect(after(args, "--ro-bind", 2)).toEqual([["/etc", "/etc"], ["/usr", "/usr"]]);
    expect(after(args, "--symlink", 2)).toEqual([["usr/bin", "/bin"]]);
    expect(after(args, "--tmpfs").flat()).toEqual([...HOST_HIDDEN, "/data", "/dev/shm"]);
    // The root's own tmpfs last: nothing new can be made at the top level.
    expect(after(args, "--remount-ro").flat()).toEqual([...HOST_HIDDEN, "/data", "/"]);
    expect(after(args, "--bind", 2)).toEqual([
      ["/data/sessions/s1/tmp", "/tmp"],
      ["/data/sessions/s1/home", "/home/session"],
      ["/data/sessions/s1/workspace", "/data/sessions/s1/workspace"],
    ]);
    // Shared dirs: writable, same path, after the session's own dirs (one under /tmp stays the host's).
    expect(after(sandboxLaunch(spec({ shared: ["/srv/cache", "/tmp/obs"] }), tools).args, "--bind", 2).slice(3)).toEqual([
      ["/srv/cache", "/srv/cache"],
      ["/tmp/obs", "/tmp/obs"],
    ]);
    // Later mounts win: every writable bind comes after every tmpfs that could cover it.
    expect(args.lastIndexOf("--tmpfs")).toBeLessThan(args.indexOf("--bind"));
    expect(args.lastIndexOf("--bind")).toBeLessThan(args.indexOf("--remount-ro"));
    expect(after(args, "--proc")).toEqual([["/proc"]]);
    expect(after(args, "--dev")).toEqual([["/dev"]]);
  });

  it("binds read-only directories after the hiding tmpfs and before they are made read-only", () => {
    const { args } = sandboxLaunch(spec({ readOnlyBinds: [{ host: "/data/sessions/s1/ctl", path: "/run/paddock" }] }), tools);
    expect(after(args, "--ro-bind", 2)).toEqual([
      ["/etc", "/etc"],
      ["/usr", "/usr"],
      ["/data/sessions/s1/ctl", "/run/paddock"],
    ]);
    const bind = args.lastIndexOf("--ro-bind");
    expect(args.indexOf("/run")).toBeLessThan(bind);
    expect(bind).toBeLessThan(args.indexOf("--remount-ro"));
    expect(() => sandboxLaunch(spec({ readOnlyBinds: [{ host: "ctl", path: "/run/paddock" }] }), tools)).toThrow(SandboxSpecError);
  });

  it("uses an image's rootfs read-only as the root, hiding nothing of the host (none of it is there)", () => {
    const { args } = sandboxLaunch(spec({ root: { kind: "image", dir: "/cache/rootfs/sha256-abc" } }), tools);
    expect(after(args, "--ro-bind", 2)).toEqual([["/cache/rootfs/sha256-abc", "/"]]);
    expect(after(args, "--tmpfs").flat()).toEqual(["/home", "/run", "/var/tmp", "/dev/shm"]);
    expect(after(args, "--remount-ro").flat()).not.toContain("/");
  });

  it("refuses a host root entry that is not one top-level name", () => {
    for (const name of ["", ".", "..", "a/b", "/etc", "a\0b"]) {
      expect(() => sandboxLaunch(spec({ root: { kind: "host", entries: [{ name, kind: "bind" }] } }), tools), JSON.stringify(name)).toThrow(SandboxSpecError);
    }
  });

  it("enters every one of the session's cgroups in its head when given them, then execs the rest of the chain", () => {
    const dirs = ["/sys/fs/cgroup/memory/paddock-r0/s-s1", "/sys/fs/cgroup/pids/paddock-r0/s-s1"];
    const { file, args } = sandboxLaunch(spec({ cgroupDirs: dirs }), tools);
    expect(file).toBe("/t/sh");
    expect(args.slice(2, 7)).toEqual(["paddock-launch", ENV_FROM, ...dirs, "--"]);
    expect(args[7]).toBe("/t/prlimit");
    expect(args[1]).toContain('echo $$ > "$1/cgroup.procs" || exit 125');
  });

  it("runs the head for real: the process writes its pid into each cgroup directory, and a failed write stops the chain", () => {
    const dirs = [mkdtempSync(join(tmpdir(), "paddock-cg-a-")), mkdtempSync(join(tmpdir(), "paddock-cg-b-"))];
    const chain = (cgroupDirs: string[]) => {
      const { file, args } = launchOf(spec({ cgroupDirs, env: {} }), { ...tools, sh: "/bin/sh" });
      // The rest of the chain replaced by a link that prints its pid (exec keeps it).
      return spawnSync(file, [...args.slice(0, args.indexOf("/t/prlimit")), "/bin/sh", "-c", "echo pid=$$"], { encoding: "utf8" });
    };
    try {
      const ok = chain(dirs);
      const pid = /pid=(\d+)/.exec(ok.stdout)?.[1];
      expect(pid).toMatch(/^\d+$/);
      for (const d of dirs) expect(readFileSync(join(d, "cgroup.procs"), "utf8")).toBe(`${pid ?? ""}\n`);
      const failed = chain([dirs[0] ?? "", "/nonexistent-paddock-cgroup"]);
      expect(failed.status).toBe(125);
      expect(failed.stdout).not.toContain("pid=");
    } finally {
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    }
  });

  it("closes every inherited descriptor but 0-2 first where the host has bash (sh cannot name one above 9)", () => {
    const withBash = sandboxLaunch(spec(), { ...tools, bash: "/t/bash" });
    expect(withBash.file).toBe("/t/bash");
    // No startup file (bash would read ~/.bashrc as root with a socket on stdin).
    expect(withBash.args.slice(0, 3)).toEqual(["--norc", "--noprofile", "-c"]);
    const script = withBash.args[3] ?? "";
    expect(script).toMatch(/^for f in \/proc\/\$\$\/fd\/\*; do n=\$\{f##\*\/\}; if \[ "\$n" -gt 2 \]; then exec \{n\}>&-; fi; done; /);
    // Closing comes before the environment's file is opened as fd 3.
    expect(script.indexOf("exec {n}>&-")).toBeLessThan(script.indexOf("exec 3<"));
    expect(withBash.args.slice(4, 8)).toEqual([...HEAD_ARGS, "/t/prlimit"]);
    expect(sandboxLaunch(spec(), tools).args[1]).not.toContain("/proc/$$/fd");
  });

  it.each([
    ["an environment name with =", { env: { "A=B": "x" } }],
    ["an empty environment name", { env: { "": "x" } }],
    ["NUL in an environment value", { env: { A: "x\0y" } }],
    ["uid 0", { uid: 0 }],
    ["gid 0", { gid: 0 }],
    ["an empty command", { command: [] }],
    ["a relative workspace", { workspace: { host: "ws", path: "/ws" } }],
    ["a relative hidden path", { hide: ["data"] }],
    ["a relative cgroup directory (or the link's end marker)", { cgroupDirs: ["--"] }],
    ["a zero process limit", { rlimits: { processes: 0, openFiles: 1, fileSizeBytes: 1 } }],
  ] as const)("refuses %s with a typed error", (_name, over) => {
    expect(() => sandboxLaunch(spec(over as Partial<SandboxSpec>), tools)).toThrow(SandboxSpecError);
  });
});
