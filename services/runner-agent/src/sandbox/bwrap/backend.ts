/**
 * The bwrap backend: the seam (../backend.ts) on this folder's primitive.
 * Each session gets a host uid of its own (uid-allocator.ts) owning its
 * directories (0700), a pooled network namespace (network-pool.ts) whose only
 * reachable addresses are its gateway relay and egress proxy on the runner's
 * end of its link, and each app or script runs in a sandbox of its own
 * (launch.ts: read-only host root, private /tmp and home, the workspace bound
 * at INSIDE_WORKSPACE, the runner's data dir hidden).
 */
import { chmod, chown, mkdir } from "node:fs/promises";
import { createServer, connect, type AddressInfo, type Server } from "node:net";
import { dirname, join } from "node:path";
import { spawn as spawnPty } from "@lydell/node-pty";
import { INITIAL_TERMINAL_SIZE } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { SpawnError } from "../../errors.ts";
import { SandboxKind, type ImageRoot, type Sandbox, type SandboxApp, type SandboxBackend, type SandboxImages, type SandboxReach, type SandboxScript, type ScriptOutcome } from "../backend.ts";
import { resolveExecutable } from "../executable.ts";
import { spawnPiped } from "../pipe-app.ts";
import { exitThroughSandbox, withSandboxExits, type AppProcess } from "../process-group.ts";
import { wrapPty } from "../pty-app.ts";
import { removeDirSoon } from "../remove-dir.ts";
import { prepareSessionsDir } from "../sessions-dir.ts";
import { imageCommandExists, prepareImageRoot } from "./image-root.ts";
import { HOST_HIDDEN, sandboxLaunch, type BwrapTools, type SandboxSpec } from "./launch.ts";
import { createSessionCgroups, type SessionCgroups } from "./cgroup.ts";
import { CgroupKind } from "./cgroup-probe.ts";
import { LimitKind, type SandboxLimits } from "./limits.ts";
import { createNetworkPool, type NetworkPool } from "./network-pool.ts";
import { createSandboxNetworks, type SandboxNetworks, type SessionNetwork } from "./network.ts";
import { resolveNetInstance, type NetInstance } from "./net-instance.ts";
import type { BwrapCapability } from "./probe.ts";
import { killUids, signalTree, untilUidGone } from "./session-processes.ts";
import { signalSession } from "./spawn.ts";
import { claimHeld, createUidAllocator, DEFAULT_UID_CLAIM_DIR, type SessionIds } from "./uid-allocator.ts";
import { hostRoot } from "./host-root.ts";

/** Where a session sees its workspace (its cwd and HOME); /home is an empty tmpfs in the sandbox. */
export const INSIDE_WORKSPACE = "/home/workspace";
const INSIDE_HOME = "/home/session";
/**
 * The ports of a session's gateway relay and egress proxy, each listening on
 * the runner's end of the session's own link (an address only that session
 * routes to): the same for every session, so the network lets them through
 * from its start (`sharedPorts`) and a create runs no `nft` (measured: one
 * `nft` run was most of the sandbox's create → running on a loaded host).
 */
const RELAY_PORT = 7118;
const EGRESS_PORT = 7119;
const SHARED_PORTS: readonly number[] = [RELAY_PORT, EGRESS_PORT];
/** Networks kept ready for creates. */
const NETWORK_POOL_SIZE = 2;

export interface BwrapBackendOptions {
  log: Logger;
  childPath: string;
  cap: BwrapCapability;
  tools: BwrapTools;
  /** netInstance/netPrefix unset: claimed host-wide at prepare (net-instance.ts). */
  /** hide: directories of the runner's credential files, hidden from sessions like its data dir; shared: bound into every session. */
  settings: { hide?: readonly string[]; shared?: readonly string[]; uidFirst: number; uidCount: number; netInstance?: string | undefined; netPrefix?: readonly [number, number] | undefined; limits: SandboxLimits };
  /** Where sessions naming an image get its root; without it such sessions are refused. */
  images?: SandboxImages | undefined;
}

export function createBwrapBackend(opts: BwrapBackendOptions): SandboxBackend {
  const { log, cap, tools, settings } = opts;
  const runnerUid = process.getuid?.() ?? 0;
  const uids = createUidAllocator({ first: settings.uidFirst, count: settings.uidCount, reserved: [0, runnerUid] });
  // A uid claimed by a live process (another runner of the host, another agent of this process, a held session) is never swept.
  const inRange = (uid: number) => uid >= settings.uidFirst && uid < settings.uidFirst + settings.uidCount && !claimHeld(DEFAULT_UID_CLAIM_DIR, uid);
  let networks: SandboxNetworks | undefined;
  let netInstance: NetInstance | undefined;
  let pool: NetworkPool | undefined;
  let hide: string[] = [];
  /** uids of the sessions held now: any other process of the range is a stray. */
  const live = new Set<number>();
  /** The sandboxes not destroyed yet: a runner that stops destroys them (their networks and relays are its own). */
  const sandboxes = new Set<Sandbox>();
  // memory, cpu and pids per session where the host offers cgroups (a delegated v2 subtree, writable v1 hierarchies); rlimits everywhere.
  // Made at prepare: v1 hierarchies are host-wide, so they are named by the runner's instance, claimed then.
  let cgroups: SessionCgroups | undefined;
  const cgroupsOffered = cap.cgroup.kind === CgroupKind.v1 || (cap.cgroup.kind === CgroupKind.v2 && cap.cgroup.hierarchies.length > 0);
  return {
    kind: SandboxKind.bwrap,
    limits: cgroupsOffered ? [LimitKind.rlimit, LimitKind.cgroup] : [LimitKind.rlimit],
    async prepare(sessionsDir) {
      const killed = await killUids(inRange);
      if (killed > 0) log.warn({ killed }, "killed sandbox processes left by a previous runner process (by uid)");
      await prepareSessionsDir(sessionsDir, log);
      netInstance = resolveNetInstance({ instance: settings.netInstance, prefix: settings.netPrefix });
      cgroups = createSessionCgroups(cap.cgroup, { instance: netInstance.instance, runnerPid: process.pid });
      await cgroups?.start();
      // Sessions' bwrap (as their uid) binds their directories from here: passable, not listable.
      const dataDir = dirname(sessionsDir);
      await chmod(dataDir, 0o711);
      await chmod(sessionsDir, 0o711);
      hide = hiddenByTmpfs([dataDir, ...(settings.hide ?? [])]);
      if (cap.network.works && cap.network.ip && cap.network.nft) {
        networks = createSandboxNetworks({ ip: cap.network.ip, nft: cap.network.nft, instance: netInstance.instance, prefix: netInstance.prefix, sharedPorts: SHARED_PORTS });
        await networks.start();
        pool = createNetworkPool({ networks, size: NETWORK_POOL_SIZE, slots: settings.uidCount, onError: (err) => log.warn({ err }, "sandbox network not built") });
      } else {
        log.warn({ reason: cap.network.reason }, "sandbox sessions get no network of their own here (loopback only): no gateway, no egress");
      }
    },
    async create({ sessionId, dir, image }) {
      const root = image === undefined ? undefined : await acquireImage(opts.images, image);
      let ids: SessionIds;
      try {
        ids = uids.allocate(sessionId);
      } catch (err) {
        root?.release();
        throw err;
      }
      live.add(ids.uid);
      const release = () => {
        live.delete(ids.uid);
        uids.release(sessionId);
        root?.release();
      };
      try {
        for (const d of [dir, join(dir, "workspace"), join(dir, "home"), join(dir, "tmp")]) {
          await mkdir(d, { recursive: true });
          await chown(d, ids.uid, ids.gid);
          await chmod(d, 0o700);
        }
        const cgroupDirs = await cgroups?.create(sessionId, settings.limits.cgroup);
        const net = pool ? await pool.take() : undefined;
        const sandbox = bwrapSandbox({ log, tools, childPath: opts.childPath, hide, shared: settings.shared, ids, sessionId, dir, net, pool, root, limits: settings.limits, cgroupDirs, cgroups, release: () => {
          release();
          sandboxes.delete(sandbox);
        } });
        sandboxes.add(sandbox);
        return sandbox;
      } catch (err) {
        release();
        await cgroups?.remove(sessionId).catch(() => undefined);
        await removeDirSoon(dir, log);
        throw err;
      }
    },
    removeDir: async (dir) => {
      await removeDirSoon(dir, log);
    },
    // Every session process runs as a uid of the range, which only held sessions hold.
    reapStrays: () => killUids((uid) => inRange(uid) && !live.has(uid)),
    async stop() {
      await Promise.all([...sandboxes].map((s) => s.destroy()));
      await pool?.stop();
      await networks?.stop();
      await cgroups?.stop();
      netInstance?.release();
    },
  };
}

interface SandboxParts {
  log: Logger;
  tools: BwrapTools;
  childPath: string;
  hide: string[];
  shared: readonly string[] | undefined;
  ids: SessionIds;
  sessionId: string;
  dir: string;
  net: SessionNetwork | undefined;
  pool: NetworkPool | undefined;
  limits: SandboxLimits;
  /** The session's cgroup directories (cgroup.ts), where the host offers cgroups. */
  cgroupDirs: string[] | undefined;
  cgroups: SessionCgroups | undefined;
  /** The image the session is rooted in; the host's root when undefined. */
  root: ImageRoot | undefined;
  release: () => void;
}

/** The image's root, held for the session (released with it); prepared for the launch's mounts. */
async function acquireImage(images: SandboxImages | undefined, reference: string): Promise<ImageRoot> {
  if (!images) throw new SpawnError(`image ${reference.slice(0, 256)}: this runner has no image store`);
  const root = await images.acquire(reference);
  try {
    await prepareImageRoot(root.rootfs, reference);
    return root;
  } catch (err) {
    root.release();
    throw err;
  }
}

function bwrapSandbox(p: SandboxParts): Sandbox {
  const workspace = join(p.dir, "workspace");
  let relay: Server | undefined;
  let destroyed = false;
  const spec = (command: readonly string[], env: Record<string, string>, tty: boolean): SandboxSpec => ({
    sessionId: p.sessionId,
    uid: p.ids.uid,
    gid: p.ids.gid,
    root: p.root ? { kind: "image", dir: p.root.rootfs } : hostRoot(),
    workspace: { host: workspace, path: INSIDE_WORKSPACE },
    home: { host: join(p.dir, "home"), path: INSIDE_HOME },
    tmpDir: join(p.dir, "tmp"),
    hide: p.hide,
    shared: p.shared,
    netnsPath: p.net?.netnsPath,
    env,
    cwd: INSIDE_WORKSPACE,
    command,
    rlimits: p.limits.rlimits,
    cgroupDirs: p.cgroupDirs,
    tty,
  });
  const killAll = async () => {
    signalSession(p.ids.uid, "SIGKILL");
    await untilUidGone(p.ids.uid, p.log);
  };
  return {
    workspace,
    insideWorkspace: INSIDE_WORKSPACE,
    ...(p.root ? { image: p.root.config } : {}),
    user: { uid: p.ids.uid, gid: p.ids.gid },
    // Nothing to hand over afterwards: what the runner writes into the workspace is given to `user` as each
    // inode is made, by descriptor (workspace/ passes it down). A chown walk by path afterwards would race the
    // session and could be pointed (a hard link it planted) at a file outside.
    adopt: () => Promise.resolve(),
    async reach(gatewayUrl): Promise<SandboxReach> {
      const net = p.net;
      if (!net) return { egressHost: "127.0.0.1", egressPort: 0, gatewayUrl: undefined, noProxy: [], allow: () => Promise.resolve() };
      let relayPort: number | undefined;
      if (gatewayUrl) {
        relay = await startRelay(net.hostAddress, new URL(gatewayUrl)).catch((err: NodeJS.ErrnoException) => {
          // Something else of the host holds the relay's port: any port does (allowed below).
          if (err.code === "EADDRINUSE") return startRelay(net.hostAddress, new URL(gatewayUrl), 0);
          throw err;
        });
        relayPort = (relay.address() as AddressInfo).port;
      }
      const url = gatewayUrl && relayPort ? `${new URL(gatewayUrl).protocol}//${net.hostAddress}:${relayPort}` : undefined;
      // The relay is the gateway: reached directly (the proxy would refuse it as a host not on the list).
      // The link lets the shared ports through already: a session whose relay and proxy got them runs no `nft` on its way to running.
      const unshared = (ports: readonly number[]) => ports.filter((port) => !SHARED_PORTS.includes(port));
      return {
        egressHost: net.hostAddress,
        egressPort: EGRESS_PORT,
        gatewayUrl: url,
        noProxy: url ? [net.hostAddress] : [],
        allow: (ports) => net.allow(unshared(relayPort ? [relayPort, ...ports] : ports)),
      };
    },
    startApp: (opts) => startApp(opts, spec, p.tools, workspace, p.root?.rootfs),
    runScript: (opts) => runScript(opts, spec, p.tools),
    freeze: (apps) => apps.forEach((app) => app.freeze()),
    thaw: (apps) => apps.forEach((app) => app.thaw()),
    killLeftovers: killAll,
    // Every process of the uid is the session's, also one that left its app's group or session (a piped app's sandbox starts a new one);
    // its cgroups, where it has them, count CPU time exactly (exited processes too).
    usageScope: () => ({ uid: p.ids.uid, cpuNanos: p.cgroups && (() => p.cgroups?.cpuNanos(p.sessionId)) }),
    async destroy() {
      if (destroyed) return;
      destroyed = true;
      await killAll();
      relay?.close();
      if (p.net) p.pool?.release(p.net);
      await p.cgroups?.remove(p.sessionId).catch((err: unknown) => p.log.warn({ err }, "session cgroup not removed"));
      await removeDirSoon(p.dir, p.log);
      // The allocator skips a uid that still owns processes (a zombie not yet reaped), so releasing now is safe.
      p.release();
    },
  };
}

type SpecOf = (command: readonly string[], env: Record<string, string>, tty: boolean) => SandboxSpec;

function startApp(opts: SandboxApp, spec: SpecOf, tools: BwrapTools, workspace: string, rootfs: string | undefined): AppProcess {
  const [command] = opts.app.cmd;
  if (!command) throw new SpawnError(`app ${opts.app.name}: empty command`);
  // What the session would exec is found here first (the workspace as the host sees it; the image's root, or the host's).
  const inWorkspace = command === INSIDE_WORKSPACE || command.startsWith(`${INSIDE_WORKSPACE}/`);
  const onHost = inWorkspace ? join(workspace, command.slice(INSIDE_WORKSPACE.length)) : command;
  const found = rootfs && !inWorkspace ? imageCommandExists(rootfs, command, opts.env.PATH ?? "") : resolveExecutable(onHost, workspace, opts.env.PATH ?? "");
  if (!found) throw new SpawnError(`app ${opts.app.name}: command not found: ${command.slice(0, 128)}`);
  const tty = opts.app.tty !== false;
  const launch = sandboxLaunch(spec(opts.app.cmd, opts.env, tty), tools);
  if (!tty) return withSandboxExits(spawnPiped({ name: opts.app.name, file: launch.file, args: launch.args, cwd: "/", env: launch.env, onData: opts.onData, signal: signalTree }));
  try {
    const size = opts.size ?? INITIAL_TERMINAL_SIZE;
    const pty = spawnPty(launch.file, launch.args, { name: "xterm-256color", cols: size.cols, rows: size.rows, cwd: "/", env: launch.env, encoding: null });
    return withSandboxExits(wrapPty(opts.app.name, pty, opts.onData, signalTree));
  } catch {
    throw new SpawnError(`app ${opts.app.name}: could not start ${command.slice(0, 128)}`);
  }
}

function runScript(opts: SandboxScript, spec: SpecOf, tools: BwrapTools): Promise<ScriptOutcome> {
  if (opts.signal?.aborted) return Promise.resolve({ kind: "aborted" });
  const launch = sandboxLaunch(spec(["/bin/sh", "-c", opts.script], opts.env, false), tools);
  let cause: "timeout" | "aborted" | undefined;
  let proc: AppProcess;
  try {
    // Output discarded (never logged: it may print secrets), as the process backend's.
    proc = spawnPiped({ name: "script", file: launch.file, args: launch.args, cwd: "/", env: launch.env, onData: () => undefined, signal: signalTree });
  } catch {
    return Promise.resolve({ kind: "spawn_error" });
  }
  proc.input.close();
  const kill = (why: "timeout" | "aborted") => {
    cause ??= why;
    signalTree(proc.pid, "SIGKILL");
  };
  const timer = setTimeout(() => kill("timeout"), opts.timeoutMs);
  const onAbort = () => kill("aborted");
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  return proc.exited.then(exitThroughSandbox).then((exit) => {
    clearTimeout(timer);
    opts.signal?.removeEventListener("abort", onAbort);
    if (cause) return { kind: cause };
    if (exit.exitCode === 0) return { kind: "ok" };
    return { kind: "exit", exitCode: exit.exitCode, signal: exit.signal };
  });
}

/**
 * The runner's data dir and its credential files' directories, each hidden
 * behind a tmpfs unless the sandbox already replaces a directory holding it
 * (its own /tmp, the emptied /home, /run…) or another of them holds it:
 * bwrap could not remount a hiding mount read-only once covered.
 */
export function hiddenByTmpfs(dirs: readonly string[]): string[] {
  const beneath = (dir: string, d: string) => dir === d || dir.startsWith(`${d === "/" ? "" : d}/`);
  const wanted = dirs.filter((dir) => dir !== "/" && !["/tmp", ...HOST_HIDDEN].some((d) => beneath(dir, d)));
  return [...new Set(wanted)].filter((dir, _, all) => !all.some((other) => other !== dir && beneath(dir, other)));
}

/** A TCP relay on host (the runner's end of a session's link) to the gateway: the session's PADDOCK_URL. */
function startRelay(host: string, target: URL, listenPort = RELAY_PORT): Promise<Server> {
  const port = Number(target.port || (target.protocol === "https:" ? 443 : 80));
  const server = createServer((client) => {
    const upstream = connect(port, target.hostname);
    client.pipe(upstream).pipe(client);
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end);
    upstream.on("error", end);
    client.once("close", end);
    upstream.once("close", end);
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(listenPort, host, () => {
      server.off("error", reject);
      resolve(server);
    });
  });
}
