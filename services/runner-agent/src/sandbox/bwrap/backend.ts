/**
 * The bwrap backend: the seam (../backend.ts) on this folder's primitive.
 * Each session gets a host uid of its own (uid-allocator.ts) owning its
 * directories (0700), a pooled network namespace (network-pool.ts) whose only
 * reachable addresses are its gateway relay and egress proxy on the runner's
 * end of its link, and each app or script runs in a sandbox of its own
 * (launch.ts: read-only host root, private /tmp and home, the workspace bound
 * at INSIDE_WORKSPACE, the runner's data dir hidden). A create without an
 * image takes a sandbox the warm pool started ahead (warm-pool.ts) when one is
 * ready, whose waiting chain its first PTY app claims; otherwise it holds the
 * same parts itself and every app starts a launch of its own (sandbox-apps.ts).
 */
import { chmod, chown, mkdir } from "node:fs/promises";
import type { AddressInfo, Server } from "node:net";
import { dirname, join } from "node:path";
import type { Logger } from "@paddock/logging";
import { SpawnError } from "../../errors.ts";
import { SandboxKind, type ImageRoot, type Sandbox, type SandboxBackend, type SandboxImages, type SandboxReach } from "../backend.ts";
import { removeDirSoon } from "../remove-dir.ts";
import { prepareSessionsDir } from "../sessions-dir.ts";
import { prepareImageRoot } from "./image-root.ts";
import { HOST_HIDDEN, sandboxLaunch, type BwrapTools, type SandboxBind, type SandboxSpec } from "./launch.ts";
import { createSessionCgroups, offersCgroups, type SessionCgroups } from "./cgroup.ts";
import { hostRoot } from "./host-root.ts";
import { resolveNetInstance, type NetInstance } from "./net-instance.ts";
import { LimitKind, type SandboxLimits } from "./limits.ts";
import { createNetworkPool, type NetworkPool } from "./network-pool.ts";
import { createSandboxNetworks, type SandboxNetworks } from "./network.ts";
import { findTool, type BwrapCapability } from "./probe.ts";
import { ExecHolder, INIT_INSIDE } from "./exec-holder.ts";
import { connectSessionPort } from "./init-port.ts";
import { OpenPorts } from "../port-connection.ts";
import { runCommand, runScript, startApp, startExec, startRelay, type AppStart } from "./sandbox-apps.ts";
import { killUids, untilUidGone } from "./session-processes.ts";
import { signalSession } from "./spawn.ts";
import { claimHeld, createUidAllocator, DEFAULT_UID_CLAIM_DIR, UidRangeError } from "./uid-allocator.ts";
import { createWarmPool, type SandboxHold, type Waiter, type WarmPool, type WarmPoolEvent } from "./warm-pool.ts";

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
/** Sandboxes kept running ahead of creates (warm-pool.ts) unless the settings say otherwise. */
export const DEFAULT_WARM_POOL_SIZE = 2;

/** An app's start (warm or cold), a change in the warm pool, or in the network work under way: for metrics, logs and tests. */
export type BwrapEvent = WarmPoolEvent | ({ type: "app_start" } & AppStart) | { type: "network_work"; underWay: number };

export interface BwrapBackendOptions {
  log: Logger;
  childPath: string;
  cap: BwrapCapability;
  tools: BwrapTools;
  /**
   * hide: directories of the runner's credential files, hidden from sessions like its data dir; shared: bound into
   * every session; netInstance/netPrefix unset: claimed host-wide at prepare (net-instance.ts).
   */
  settings: {
    hide?: readonly string[];
    shared?: readonly string[];
    uidFirst: number;
    uidCount: number;
    netInstance?: string | undefined;
    netPrefix?: readonly [number, number] | undefined;
    limits: SandboxLimits;
    warmPool?: number | undefined;
    /** The exec init binary (native/paddock-init.c, static); without it every exec is a launch of its own. */
    init?: string | undefined;
  };
  /** Where sessions naming an image get its root; without it such sessions are refused. */
  images?: SandboxImages | undefined;
  onEvent?: ((event: BwrapEvent) => void) | undefined;
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
  let warm: WarmPool | undefined;
  let hide: string[] = [];
  /** uids of the sessions and warm sandboxes held now: any other process of the range is a stray. */
  const live = new Set<number>();
  /** The sandboxes not destroyed yet: a runner that stops destroys them (their networks and relays are its own). */
  const sandboxes = new Set<Sandbox>();
  // memory, cpu and pids per session where the host offers cgroups (a delegated v2 subtree, writable v1 hierarchies); rlimits everywhere.
  // Made at prepare: v1 hierarchies are host-wide, so they are named by the runner's instance, claimed then.
  let cgroups: SessionCgroups | undefined;
  const cgroupsOffered = offersCgroups(cap.cgroup);

  /** A uid, its directories (0700, its own), its cgroup and a network, under key (a session id, or a warm entry's name). */
  const hold = async (key: string, dir: string): Promise<SandboxHold> => {
    const ids = uids.allocate(key);
    live.add(ids.uid);
    let cgroupDirs: string[] | undefined;
    try {
      for (const d of [dir, join(dir, "workspace"), join(dir, "home"), join(dir, "tmp")]) {
        await mkdir(d, { recursive: true });
        await chown(d, ids.uid, ids.gid);
        await chmod(d, 0o700);
      }
      // Keyed by the hold, not the session: a warm sandbox's cgroup is made before its session is known.
      cgroupDirs = await cgroups?.create(key, settings.limits.cgroup);
      const net = pool ? await pool.take() : undefined;
      return { key, ids, dir, net, cgroupDirs };
    } catch (err) {
      if (cgroupDirs) await cgroups?.remove(key).catch(() => undefined);
      live.delete(ids.uid);
      uids.release(key);
      await removeDirSoon(dir, log);
      throw err;
    }
  };
  /** Kills what runs as the hold's uid and gives back what it held; resolves once its directory's path is free. */
  const release = async (h: SandboxHold): Promise<{ deleted: Promise<void> }> => {
    signalSession(h.ids.uid, "SIGKILL");
    await untilUidGone(h.ids.uid, log);
    if (h.net) pool?.release(h.net);
    await cgroups?.remove(h.key).catch((err: unknown) => log.warn({ err }, "session cgroup not removed"));
    const removed = await removeDirSoon(h.dir, log);
    // The allocator skips a uid that still owns processes (a zombie not yet reaped), so releasing now is safe.
    live.delete(h.ids.uid);
    uids.release(h.key);
    return removed;
  };
  /** A cold create's parts; a uid a warm sandbox holds is given up for it when the range has none left. */
  const holdCold = async (sessionId: string, dir: string): Promise<SandboxHold> => {
    for (;;) {
      try {
        return await hold(sessionId, dir);
      } catch (err) {
        if (!(err instanceof UidRangeError) || !(await warm?.shrink())) throw err;
      }
    }
  };
  const specOf = (h: SandboxHold, root: ImageRoot | undefined): SpecOf => (command, env, tty, readOnlyBinds) =>
    sandboxSpec({ hold: h, root, hide, shared: settings.shared, limits: settings.limits }, command, env, tty, readOnlyBinds);
  const emit = (event: BwrapEvent) => {
    // A waiter that died or printed before its claim is worth a line; one dropped at stop, or for a cold create's uid, is not.
    if (event.type === "discarded" && !["runner stopping", "its uid is wanted"].includes(event.reason)) log.info({ uid: event.uid, reason: event.reason }, "warm sandbox discarded");
    opts.onEvent?.(event);
  };

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
        networks = createSandboxNetworks({ ip: cap.network.ip, nft: cap.network.nft, instance: netInstance.instance, prefix: netInstance.prefix, sharedPorts: SHARED_PORTS, ownerUid: process.getuid?.() });
        await networks.start();
        pool = createNetworkPool({ networks, size: NETWORK_POOL_SIZE, slots: settings.uidCount, onError: (err) => log.warn({ err }, "sandbox network not built"), onWork: (underWay) => emit({ type: "network_work", underWay }) });
      } else {
        log.warn({ reason: cap.network.reason }, "sandbox sessions get no network of their own here (loopback only): no gateway, no egress");
      }
      if (!tools.bash) log.warn("no bash on this host: sandboxes inherit the runner's open descriptors (other sessions' terminals among them); install bash");
      const size = settings.warmPool ?? DEFAULT_WARM_POOL_SIZE;
      const mkfifo = findTool("mkfifo", opts.childPath);
      if (size > 0 && !mkfifo) log.warn("no warm sandboxes: mkfifo not found (every create starts its sandbox)");
      if (size > 0 && mkfifo) {
        warm = createWarmPool({ size, sessionsDir, log, mkfifo, sh: tools.sh, runnerUid, hold, release: async (h) => (await release(h)).deleted, onEvent: emit, launch: (h, command, env, readOnly) => sandboxLaunch(specOf(h, undefined)(command, env, true, [readOnly]), tools) });
        // The runner's first creates find sandboxes waiting.
        await warm.fill();
        log.info({ ready: warm.readyCount, size }, "warm sandboxes ready");
      }
    },
    async create({ sessionId, dir, image }) {
      const root = image === undefined ? undefined : await acquireImage(opts.images, image);
      // Only host-rooted sandboxes are kept warm (an image's would be one pool per image).
      const taken = root ? undefined : await warm?.take(dir);
      let h: SandboxHold;
      try {
        h = taken?.hold ?? (await holdCold(sessionId, dir));
      } catch (err) {
        root?.release();
        throw err;
      }
      const coldReason = root ? "image" : warm ? "no warm sandbox ready" : "no warm pool";
      const sandbox = bwrapSandbox({ log, tools, hold: h, waiter: taken?.waiter, coldReason, pool, root, cgroups, spec: specOf(h, root), init: settings.init, emit, release: async () => {
        await release(h);
        root?.release();
        sandboxes.delete(sandbox);
      } });
      sandboxes.add(sandbox);
      return sandbox;
    },
    removeDir: async (dir) => {
      await removeDirSoon(dir, log);
    },
    // Every session process runs as a uid of the range, which only held sessions and warm sandboxes hold.
    reapStrays: () => killUids((uid) => inRange(uid) && !live.has(uid)),
    async stop() {
      await Promise.all([...sandboxes].map((s) => s.destroy()));
      await warm?.stop();
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
  hold: SandboxHold;
  /** The warm sandbox's waiting chain, for its first app; undefined on a cold create. */
  waiter: Waiter | undefined;
  /** Why apps start cold when there is no waiter. */
  coldReason: string;
  pool: NetworkPool | undefined;
  /** The image the session is rooted in; the host's root when undefined. */
  root: ImageRoot | undefined;
  cgroups: SessionCgroups | undefined;
  spec: SpecOf;
  /** The exec init's host path (settings.init). */
  init: string | undefined;
  emit: (event: BwrapEvent) => void;
  /** Gives back the hold and the image (after everything of the session was killed). */
  release: () => Promise<void>;
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

type SpecOf = (command: readonly string[], env: Record<string, string>, tty: boolean, readOnlyBinds?: readonly SandboxBind[]) => SandboxSpec;

function sandboxSpec(
  p: { hold: SandboxHold; root: ImageRoot | undefined; hide: string[]; shared: readonly string[] | undefined; limits: SandboxLimits },
  command: readonly string[],
  env: Record<string, string>,
  tty: boolean,
  readOnlyBinds?: readonly SandboxBind[],
): SandboxSpec {
  const { hold: h } = p;
  return {
    sessionId: h.key,
    uid: h.ids.uid,
    gid: h.ids.gid,
    root: p.root ? { kind: "image", dir: p.root.rootfs } : hostRoot(),
    workspace: { host: join(h.dir, "workspace"), path: INSIDE_WORKSPACE },
    home: { host: join(h.dir, "home"), path: INSIDE_HOME },
    tmpDir: join(h.dir, "tmp"),
    hide: p.hide,
    shared: p.shared,
    readOnlyBinds,
    netnsPath: h.net?.netnsPath,
    env,
    cwd: INSIDE_WORKSPACE,
    command,
    rlimits: p.limits.rlimits,
    cgroupDirs: h.cgroupDirs,
    tty,
  };
}

function bwrapSandbox(p: SandboxParts): Sandbox {
  const workspace = join(p.hold.dir, "workspace");
  const uid = p.hold.ids.uid;
  let relay: Server | undefined;
  let destroyed = false;
  let waiter = p.waiter;
  const takeWaiter = () => {
    const w = waiter;
    waiter = undefined;
    return w;
  };
  const init = p.init;
  // The session's exec namespace, started by its first exec (exec-holder.ts).
  const holder = init ? new ExecHolder({ log: p.log, launch: () => sandboxLaunch({ ...p.spec([INIT_INSIDE], {}, false, [{ host: init, path: INIT_INSIDE }]), asPid1: true }, p.tools) }) : undefined;
  const where = { workspace: { host: workspace, inside: INSIDE_WORKSPACE }, rootfs: p.root?.rootfs };
  const ports = new OpenPorts();
  const killAll = async () => {
    signalSession(uid, "SIGKILL");
    await untilUidGone(uid, p.log);
  };
  return {
    workspace,
    insideWorkspace: INSIDE_WORKSPACE,
    user: { uid, gid: p.hold.ids.gid },
    ...(p.root ? { image: p.root.config } : {}),
    // Nothing to hand over afterwards: what the runner writes into the workspace is given to `user` as each
    // inode is made, by descriptor (workspace/ passes it down). A chown walk by path afterwards would race the
    // session and could be pointed (a hard link it planted) at a file outside.
    adopt: () => Promise.resolve(),
    async reach(gatewayUrl): Promise<SandboxReach> {
      const net = p.hold.net;
      if (!net) return { egressHost: "127.0.0.1", egressPort: 0, gatewayUrl: undefined, noProxy: [], allow: () => Promise.resolve() };
      let relayPort: number | undefined;
      if (gatewayUrl) {
        relay = await startRelay(net.hostAddress, new URL(gatewayUrl), RELAY_PORT).catch((err: NodeJS.ErrnoException) => {
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
    startApp: (opts) =>
      startApp(opts, {
        spec: p.spec,
        tools: p.tools,
        workspace: { host: workspace, inside: INSIDE_WORKSPACE },
        rootfs: p.root?.rootfs,
        takeWaiter,
        coldReason: p.waiter ? "not the sandbox's first app" : p.coldReason,
        onStart: (start) => p.emit({ type: "app_start", ...start }),
      }),
    startExec: (opts) => (holder ? startExec(opts, holder, where) : startApp({ ...opts, app: { ...opts.app, tty: false } }, { ...where, spec: p.spec, tools: p.tools, takeWaiter: () => undefined, coldReason: "exec", onStart: () => undefined })),
    connectPort: async (port) => ports.track(await connectSessionPort(p.hold.net?.sandboxAddress, holder, port)),
    runScript: (opts) => runScript(opts, p.spec, p.tools),
    runCommand: (opts) => runCommand(opts, p.spec, p.tools, where),
    freeze: (apps) => {
      ports.closeAll();
      apps.forEach((app) => app.freeze());
      holder?.freeze();
    },
    thaw: (apps) => {
      holder?.thaw();
      apps.forEach((app) => app.thaw());
    },
    killLeftovers: killAll,
    // Every process of the uid is the session's, also one that left its app's group or session (a piped app's sandbox starts a new one);
    // its cgroups, where it has them, count CPU time exactly (exited processes too).
    usageScope: () => ({ uid, cpuNanos: p.cgroups && (() => p.cgroups?.cpuNanos(p.hold.key)) }),
    async destroy() {
      if (destroyed) return;
      destroyed = true;
      takeWaiter()?.dispose("session ended");
      ports.closeAll();
      // Its init kills the namespace as its stdin closes; the uid's sweep in release is the backstop.
      void holder?.close();
      relay?.close();
      await p.release();
    },
  };
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
