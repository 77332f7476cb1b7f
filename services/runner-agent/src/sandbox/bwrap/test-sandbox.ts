/**
 * Test support for the bwrap primitive: real sessions on this host (a uid,
 * directories owned by it, a network with a gateway stand-in on its allowed
 * port) and a way to run a script in one and collect what it printed.
 */
import { chmodSync, chownSync, mkdirSync, mkdtempSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { createServer as createNetServer, type AddressInfo, type Server as NetServer } from "node:net";
import { join } from "node:path";
import type { SandboxSpec } from "./launch.ts";
import { createSandboxNetworks, type SandboxNetworks, type SessionNetwork } from "./network.ts";
import type { BwrapCapability } from "./probe.ts";
import { spawnInSandbox, type SandboxExit, type SandboxProcess } from "./spawn.ts";
import { createUidAllocator, type SessionIds, type UidAllocator } from "./uid-allocator.ts";
import { hostRoot } from "./host-root.ts";

/** The PATH sessions and the probe use in tests. */
export const TEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** Ids that differ between test files running at once on one host (uids, interface names, addresses). */
export function testHostIds(pid = process.pid): { firstUid: number; instance: string; prefix: [number, number] } {
  return { firstUid: 150_000 + (pid % 5_000) * 16, instance: (pid % 1_679_616).toString(36).padStart(4, "0"), prefix: [10, 200 + (pid % 50)] };
}

export interface TestSession {
  id: string;
  ids: SessionIds;
  dir: string;
  workspace: string;
  net: SessionNetwork;
  /** An HTTP server on the session's allowed port, answering "gateway-ok". */
  gatewayPort: number;
  spec(command: string[], over?: Partial<SandboxSpec>): SandboxSpec;
}

export interface TestSandboxes {
  networks: SandboxNetworks;
  /** A runner-wide listener on all addresses (networks' sharedPorts); answers "shared:<peer address>". */
  sharedPort: number;
  session(id: string): Promise<TestSession>;
  close(): Promise<void>;
}

export async function startTestSandboxes(cap: BwrapCapability, uids: UidAllocator, dataDir: string): Promise<TestSandboxes> {
  const { instance, prefix } = testHostIds();
  if (!cap.network.ip || !cap.network.nft) throw new Error(`no per-session networks here: ${cap.network.reason ?? ""}`);
  const shared = createNetServer((c) => c.end(`shared:${c.remoteAddress ?? ""}\n`));
  await new Promise<void>((resolve) => shared.listen(0, "0.0.0.0", resolve));
  const sharedPort = (shared.address() as AddressInfo).port;
  const networks = createSandboxNetworks({ ip: cap.network.ip, nft: cap.network.nft, instance, prefix, sharedPorts: [sharedPort] });
  await networks.start();
  // The runner's data dir: root's, and passable, as each session's directory below it is its uid's and 0700.
  mkdirSync(join(dataDir, "sessions"), { recursive: true });
  chmodSync(dataDir, 0o755);
  chmodSync(join(dataDir, "sessions"), 0o755);
  const servers: (Server | NetServer)[] = [shared];
  const nets: SessionNetwork[] = [];
  return {
    networks,
    sharedPort,
    async session(id) {
      const ids = uids.allocate(id);
      const dir = join(dataDir, "sessions", id);
      const workspace = join(dir, "workspace");
      for (const d of [dir, workspace, join(dir, "home"), join(dir, "tmp")]) {
        mkdirSync(d, { recursive: true });
        chownSync(d, ids.uid, ids.gid);
        chmodSync(d, 0o700);
      }
      const net = await networks.create(ids.slot);
      nets.push(net);
      const gateway = createServer((_req, res) => res.end("gateway-ok\n"));
      servers.push(gateway);
      await new Promise<void>((resolve) => gateway.listen(0, net.hostAddress, resolve));
      const gatewayPort = (gateway.address() as AddressInfo).port;
      await net.allow([gatewayPort]);
      const spec = (command: string[], over: Partial<SandboxSpec> = {}): SandboxSpec => ({
        sessionId: id,
        uid: ids.uid,
        gid: ids.gid,
        root: hostRoot(),
        workspace: { host: workspace, path: workspace },
        home: { host: join(dir, "home"), path: "/home/session" },
        tmpDir: join(dir, "tmp"),
        hide: [dataDir],
        netnsPath: net.netnsPath,
        env: { PATH: TEST_PATH, HOME: "/home/session", PADDOCK_URL: `http://${net.hostAddress}:${gatewayPort}` },
        cwd: workspace,
        command,
        rlimits: { processes: 64, openFiles: 256, fileSizeBytes: 16 * 1024 * 1024 },
        tty: false,
        ...over,
      });
      return { id, ids, dir, workspace, net, gatewayPort, spec };
    },
    async close() {
      for (const s of servers) s.close();
      for (const n of nets) await n.destroy();
      await networks.stop();
    },
  };
}

export interface RunResult extends SandboxExit {
  out: string;
}

/** Starts spec; `started` resolves with the process, `done` with everything it printed once it exited. */
export function runInSandbox(spec: SandboxSpec, cap: BwrapCapability, onOutput?: (text: string) => void): { proc: SandboxProcess; done: Promise<RunResult> } {
  let out = "";
  const tools = cap.tools;
  if (!tools) throw new Error(`bwrap does not work here: ${cap.reason ?? ""}`);
  const proc = spawnInSandbox(spec, {
    tools,
    onData: (bytes) => {
      const text = Buffer.from(bytes).toString();
      out += text;
      onOutput?.(out);
    },
  });
  return { proc, done: proc.exited.then((exit) => ({ ...exit, out })) };
}

/** A bash line that prints CONNECTED:<tag> when it can open a TCP connection to host:port, REFUSED:<tag> otherwise. */
export function tryConnect(tag: string, host: string, port: number): string {
  return `if timeout 5 bash -c 'exec 3<>/dev/tcp/${host}/${port}' 2>/dev/null; then echo CONNECTED:${tag}; else echo REFUSED:${tag}; fi`;
}

/**
 * One session's directories in a fresh data dir under /var/lib (which
 * sessions see unless it is hidden): workspace, home and tmp owned by a uid
 * of firstUid's range allocated as key.
 */
export function singleSession(prefix: string, firstUid: number, key: string): { dataDir: string; session: SessionIds } {
  const dataDir = mkdtempSync(`/var/lib/${prefix}`);
  chmodSync(dataDir, 0o755);
  const session = createUidAllocator({ first: firstUid, count: 8, reserved: [0] }).allocate(key);
  for (const d of ["workspace", "home", "tmp"]) {
    mkdirSync(join(dataDir, d));
    chownSync(join(dataDir, d), session.uid, session.gid);
  }
  return { dataDir, session };
}

/** A piped launch of command as session over the host root, with small rlimits; `over` sets the rest (env, hide, netnsPath). */
export function singleSessionSpec(dataDir: string, session: SessionIds, command: string[], over: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    sessionId: "single",
    uid: session.uid,
    gid: session.gid,
    root: hostRoot(),
    workspace: { host: join(dataDir, "workspace"), path: "/home/workspace" },
    home: { host: join(dataDir, "home"), path: "/home/session" },
    tmpDir: join(dataDir, "tmp"),
    hide: [],
    env: {},
    cwd: "/home/workspace",
    command,
    rlimits: { processes: 64, openFiles: 256, fileSizeBytes: 1 << 20 },
    tty: false,
    ...over,
  };
}
