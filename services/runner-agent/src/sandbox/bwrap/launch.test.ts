import { describe, expect, it } from "vitest";
import { envArgs, HOST_HIDDEN, SandboxSpecError, sandboxLaunch as launchOf, type BwrapTools, type SandboxSpec } from "./launch.ts";

const tools: BwrapTools = { bwrap: "/t/bwrap", nsenter: "/t/nsenter", prlimit: "/t/prlimit", setpriv: "/t/setpriv", sh: "/t/sh" };

function spec(over: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    sessionId: "s1",
    uid: 100_001,
    gid: 100_001,
    root: { kind: "host" },
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
/** The head link's positional arguments: $0, the environment's file, the cgroup directory. */
const HEAD_ARGS = ["paddock-launch", ENV_FROM, "-"];

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

  it("binds the host root read-only, hides the host's private dirs and the spec's, then binds the writable dirs over them", () => {
    const { args } = sandboxLaunch(spec(), tools);
    expect(after(args, "--ro-bind", 2)).toEqual([["/", "/"]]);
    expect(after(args, "--tmpfs").flat()).toEqual([...HOST_HIDDEN, "/data", "/dev/shm"]);
    expect(after(args, "--remount-ro").flat()).toEqual([...HOST_HIDDEN, "/data"]);
    expect(after(args, "--bind", 2)).toEqual([
      ["/data/sessions/s1/tmp", "/tmp"],
      ["/data/sessions/s1/home", "/home/session"],
      ["/data/sessions/s1/workspace", "/data/sessions/s1/workspace"],
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
      ["/", "/"],
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
  });

  it("enters the session's cgroup in its head when given one", () => {
    const { file, args } = sandboxLaunch(spec({ cgroupDir: "/sys/fs/cgroup/paddock/session-s1" }), tools);
    expect(file).toBe("/t/sh");
    expect(args.slice(2, 6)).toEqual(["paddock-launch", ENV_FROM, "/sys/fs/cgroup/paddock/session-s1", "/t/prlimit"]);
    expect(args[1]).toContain('echo $$ > "$2/cgroup.procs" || exit 125');
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
    ["a zero process limit", { rlimits: { processes: 0, openFiles: 1, fileSizeBytes: 1 } }],
  ] as const)("refuses %s with a typed error", (_name, over) => {
    expect(() => sandboxLaunch(spec(over as Partial<SandboxSpec>), tools)).toThrow(SandboxSpecError);
  });
});
