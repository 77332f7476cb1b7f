/**
 * A session's sandbox launch as a pure function: a typed spec in, the argv of
 * the exec chain out. Nothing here touches the system.
 *
 * The chain, each link exec'ing the next (so one pid from the runner's view):
 *
 *   [bash -c HEAD] prlimit … nsenter --net=NETNS -- setpriv … -- bwrap --clearenv --args 3 … -- command
 *   [bash -c HEAD] prlimit … setpriv … -- bwrap --clearenv --args 3 … -- command     (no network of its own)
 *
 * - The head (bash, as root; `sh` where the host has none) closes every
 *   descriptor but stdin, stdout and stderr: node-pty opens PTY masters
 *   without O_CLOEXEC, so every process the runner starts inherits the
 *   masters of the terminals open then, and a session holding one could read
 *   another session's terminal and type into it. It then opens the session's
 *   environment (`envFrom`, see below) as fd 3 and joins the session's cgroups
 *   where it has them (cgroup.ts: one directory on v2, one per hierarchy on v1) (`sh` cannot name a descriptor above 9: without bash
 *   nothing is closed, and the runner warns at start).
 * - prlimit (as root) sets the session's rlimits; they are inherited by
 *   everything below. RLIMIT_NPROC counts the processes of the session's uid,
 *   which no one else uses (uid-allocator.ts), so it is a per-session limit.
 * - nsenter (as root) joins the session's network namespace prepared by
 *   network.ts (bwrap itself cannot join an existing one). Without a netns,
 *   bwrap makes an empty namespace (`--unshare-net`: loopback only).
 * - setpriv drops to the session's host uid/gid with no supplementary groups,
 *   clears the inheritable capabilities (and with them the ambient ones) and
 *   sets no_new_privs. nsenter's own `--setuid` would not: a setuid from root
 *   keeps the inheritable set, and one between two non-root uids (a runner of
 *   its own user, decision 0043) keeps the ambient set, which the next exec
 *   turns into effective capabilities. One exec more (about a millisecond);
 *   a warm pool's sandbox (warm-pool.ts) runs the chain before its create.
 * - bwrap runs unprivileged as that uid: a user namespace mapping the uid to
 *   itself (the session is that uid on the host, never root), and its own pid,
 *   mount, ipc, uts and cgroup namespaces, with no capability in any set
 *   (setpriv above; bwrap's no_new_privs: no setuid binary gives root back).
 *
 * The session's environment reaches none of these links: the chain is
 * spawned with an empty one, and bwrap (`--clearenv`, then `--setenv` for each
 * variable read from fd 3 by `--args`) gives the command exactly the spec's,
 * plus PWD (bwrap's chdir). Passed through the chain, a variable the session
 * names (a secret called LD_PRELOAD, LD_LIBRARY_PATH, GCONV_PATH…) would
 * steer the dynamic loader or libc of root's prlimit and nsenter. It is never
 * in an argv either (world-readable in /proc/<pid>/cmdline): `envFrom` names a
 * file only the runner can open (launch-env.ts).
 */

/** Host paths of the tools in the chain (probe.ts finds them). */
export interface BwrapTools {
  bwrap: string;
  nsenter: string;
  prlimit: string;
  setpriv: string;
  sh: string;
  /** The chain's head where the host has it: it can close descriptors above 9 (above). */
  bash?: string | undefined;
}

export interface SandboxRlimits {
  /** RLIMIT_NPROC: processes (and threads) of the session's uid. */
  processes: number;
  /** RLIMIT_NOFILE: open files per process. */
  openFiles: number;
  /** RLIMIT_FSIZE in bytes: the largest file a process may write. */
  fileSizeBytes: number;
}

/**
 * The session's root: the host's top-level entries bound read-only one by one
 * (host-root.ts says why not `/` at once), or an unpacked image's rootfs read-only.
 */
export type SandboxRoot = { kind: "host"; entries: readonly HostRootEntry[] } | { kind: "image"; dir: string };

/** A top-level entry of the host's `/` (host-root.ts reads them): bound read-only, or made as the same symlink. */
export type HostRootEntry = { name: string; kind: "bind" } | { name: string; kind: "symlink"; target: string };

/** A host directory bound writable into the sandbox at `path`. */
export interface SandboxBind {
  host: string;
  path: string;
}

export interface SandboxSpec {
  sessionId: string;
  /** The session's host uid and gid (uid-allocator.ts): never 0, never the runner's. */
  uid: number;
  gid: number;
  root: SandboxRoot;
  workspace: SandboxBind;
  home: SandboxBind;
  /** Host directory seen as `/tmp` (private to the session; on disk, not in memory). */
  tmpDir: string;
  /**
   * Host paths hidden behind an empty tmpfs when the root is the host's (the
   * runner's data dir, credential files' directories). Mounted before the
   * workspace and home, so those can live beneath a hidden directory.
   */
  hide: readonly string[];
  /**
   * Host directories the operator shares with every session
   * (PADDOCK_SANDBOX_SHARED_DIRS), bound writable at the same path, after
   * everything else: what is in them is every session's.
   */
  shared?: readonly string[] | undefined;
  /** The session's network namespace (network.ts); undefined: loopback only. */
  netnsPath?: string | undefined;
  /** Host directories bound read-only at their paths, after the hiding tmpfs (a warm pool's control directory under /run). */
  readOnlyBinds?: readonly SandboxBind[] | undefined;
  /** The cgroup directories to start in (cgroup.ts: one on v2, one per hierarchy on v1), where the host offers them. */
  cgroupDirs?: readonly string[] | undefined;
  /** The complete environment of the session's process (with TERM for a terminal: nothing of the runner's spawn reaches it). */
  env: Record<string, string>;
  cwd: string;
  command: readonly string[];
  rlimits: SandboxRlimits;
  /**
   * Whether the command runs on a terminal the runner gives it (a PTY). Then
   * the sandbox stays in the PTY's session so the terminal stays its
   * controlling terminal (job control, ^C, ^Z); otherwise bwrap starts a new
   * session (see launchArgv).
   */
  tty: boolean;
  /** The command is the pid namespace's pid 1 (bwrap --as-pid-1: no reaper of bwrap's own): the exec init (exec-holder.ts). */
  asPid1?: boolean | undefined;
}

export interface SandboxLaunch {
  file: string;
  args: string[];
  /** What to spawn the chain with: nothing (the session's environment goes through `envFrom`). */
  env: Record<string, string>;
}

/**
 * Host directories a session never sees when its root is the host's, besides
 * the spec's `hide`: other users' homes and root's, runtime state and its
 * sockets (a unix socket stays connectable on a read-only mount), and the
 * host's shared temporary directory (the session's own dir covers `/tmp`).
 */
export const HOST_HIDDEN = ["/root", "/home", "/run", "/var/tmp", "/sys/fs/cgroup"] as const;

/** Directories an image's root gets an empty tmpfs on (image-root.ts makes them where the image lacks them). */
export const IMAGE_TMPFS = ["/home", "/run", "/var/tmp"] as const;

/** `/dev/shm` is memory: bounded, since without delegated cgroups nothing else bounds it. */
export const DEV_SHM_BYTES = 64 * 1024 * 1024;

/** The descriptor the chain's head opens the environment's file on, for bwrap's `--args`. */
const ENV_FD = 3;

/**
 * The head's script: $1 the environment's file ("-": none), then the cgroup
 * directories to enter up to a `--`, then the rest of the chain. Fails (125)
 * rather than run the session without its environment or outside a cgroup.
 */
function headScript(closeFds: boolean): string {
  const close = closeFds ? 'for f in /proc/$$/fd/*; do n=${f##*/}; if [ "$n" -gt 2 ]; then exec {n}>&-; fi; done; ' : "";
  return `${close}if [ "$1" != - ]; then exec ${ENV_FD}<"$1" || exit 125; fi; shift; while [ "$1" != -- ]; do echo $$ > "$1/cgroup.procs" || exit 125; shift; done; shift; exec "$@"`;
}

/** The session's environment as bwrap reads it from `--args`: `--setenv NAME VALUE` for each variable, NUL-separated. */
export function envArgs(env: Record<string, string>): Buffer {
  return Buffer.from(Object.entries(env).map(([name, value]) => `--setenv\0${name}\0${value}\0`).join(""));
}

/**
 * The argv (and the empty env) that starts spec's command in its sandbox.
 * `envFrom` is a path the chain's head can open holding envArgs(spec.env)
 * (launch-env.ts); required unless spec.env is empty.
 */
export function sandboxLaunch(spec: SandboxSpec, tools: BwrapTools, envFrom?: string): SandboxLaunch {
  assertSpec(spec);
  if (Object.keys(spec.env).length > 0 && envFrom === undefined) throw new SandboxSpecError("the session's environment goes through a file (envFrom), never through the chain");
  const chain: string[] = [];
  // bash reads no startup file (not even ~/.bashrc, which it would for a socket on stdin, as a piped spawn's is).
  const head = tools.bash ? [tools.bash, "--norc", "--noprofile"] : [tools.sh];
  const cgroupDirs = spec.cgroupDirs ?? [];
  if (tools.bash || envFrom !== undefined || cgroupDirs.length > 0) chain.push(...head, "-c", headScript(tools.bash !== undefined), "paddock-launch", envFrom ?? "-", ...cgroupDirs, "--");
  const { processes, openFiles, fileSizeBytes } = spec.rlimits;
  chain.push(tools.prlimit, `--nproc=${processes}`, `--nofile=${openFiles}`, `--fsize=${fileSizeBytes}`, "--");
  if (spec.netnsPath) chain.push(tools.nsenter, `--net=${spec.netnsPath}`, "--");
  chain.push(tools.setpriv, `--reuid=${spec.uid}`, `--regid=${spec.gid}`, "--clear-groups", "--inh-caps=-all", "--no-new-privs", "--");
  chain.push(tools.bwrap, "--clearenv", ...(envFrom !== undefined ? ["--args", String(ENV_FD)] : []), ...bwrapArgs(spec), "--", ...spec.command);
  const [file, ...args] = chain;
  return { file: file ?? tools.bwrap, args, env: {} };
}

/**
 * bwrap's own options. `--die-with-parent`: the sandbox is SIGKILLed when the
 * process that spawned the chain (the runner) dies, so a killed runner leaves
 * no session running. `--new-session` only without a terminal: it protects
 * the caller's terminal from TIOCSTI injection, but under a PTY the terminal
 * is the session's own and setsid would cut it off as controlling terminal.
 */
export function bwrapArgs(spec: SandboxSpec): string[] {
  const args = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent"];
  if (!spec.netnsPath) args.push("--unshare-net");
  if (!spec.tty) args.push("--new-session");
  if (spec.asPid1) args.push("--as-pid-1");
  args.push("--hostname", "paddock");
  // An image's root is read-only from the start: /home is a tmpfs so bwrap can make the workspace's and home's mount points in it.
  const hidden = spec.root.kind === "host" ? [...HOST_HIDDEN, ...spec.hide] : [...IMAGE_TMPFS];
  if (spec.root.kind === "host") {
    for (const e of spec.root.entries) {
      if (e.kind === "symlink") args.push("--symlink", e.target, `/${e.name}`);
      else args.push("--ro-bind", `/${e.name}`, `/${e.name}`);
    }
  } else {
    args.push("--ro-bind", spec.root.dir, "/");
  }
  for (const dir of hidden) args.push("--tmpfs", dir);
  args.push("--proc", "/proc", "--dev", "/dev", "--size", String(DEV_SHM_BYTES), "--tmpfs", "/dev/shm");
  args.push("--bind", spec.tmpDir, "/tmp");
  args.push("--bind", spec.home.host, spec.home.path);
  args.push("--bind", spec.workspace.host, spec.workspace.path);
  for (const dir of spec.shared ?? []) args.push("--bind", dir, dir);
  for (const b of spec.readOnlyBinds ?? []) args.push("--ro-bind", b.host, b.path);
  // The hiding tmpfs were writable (bwrap makes the binds' mount points in them); now they are empty and read-only.
  for (const dir of hidden) args.push("--remount-ro", dir);
  // The host root's own tmpfs (what holds its entries' mount points) ends read-only too.
  if (spec.root.kind === "host") args.push("--remount-ro", "/");
  args.push("--chdir", spec.cwd);
  return args;
}

export class SandboxSpecError extends Error {
  readonly code = "invalid_sandbox_spec";
  constructor(message: string) {
    super(message);
    this.name = "SandboxSpecError";
  }
}

function assertSpec(spec: SandboxSpec): void {
  if (!Number.isInteger(spec.uid) || spec.uid <= 0) throw new SandboxSpecError("uid must be a positive integer (never root)");
  if (!Number.isInteger(spec.gid) || spec.gid <= 0) throw new SandboxSpecError("gid must be a positive integer (never root)");
  if (spec.command.length === 0) throw new SandboxSpecError("empty command");
  const paths = [spec.workspace.host, spec.workspace.path, spec.home.host, spec.home.path, spec.tmpDir, spec.cwd, ...spec.hide, ...(spec.shared ?? []), ...(spec.cgroupDirs ?? [])];
  for (const b of spec.readOnlyBinds ?? []) paths.push(b.host, b.path);
  if (spec.root.kind === "image") paths.push(spec.root.dir);
  else for (const e of spec.root.entries) if (!/^[^/\0]+$/.test(e.name) || e.name === "." || e.name === "..") throw new SandboxSpecError(`not a top-level name: ${e.name.slice(0, 128)}`);
  for (const p of paths) if (!p.startsWith("/")) throw new SandboxSpecError(`not an absolute path: ${p.slice(0, 128)}`);
  for (const name of Object.keys(spec.env)) if (name === "" || name.includes("=") || name.includes("\0")) throw new SandboxSpecError("an environment name is empty or holds = or NUL");
  for (const value of Object.values(spec.env)) if (value.includes("\0")) throw new SandboxSpecError("an environment value holds NUL");
  for (const [name, value] of Object.entries(spec.rlimits)) {
    if (!Number.isInteger(value) || value <= 0) throw new SandboxSpecError(`rlimit ${name} must be a positive integer`);
  }
}
