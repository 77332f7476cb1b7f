/**
 * The bwrap sandbox primitive (services/runner-agent/src/sandbox/bwrap, issue
 * #23), measured on its own before it is wired into the runner: a plain
 * spawn, a bare `bwrap` spawn, the full launch chain without and with the
 * session's network, the network's own setup and teardown, and on a PTY the
 * time to first output against a bare PTY spawn. Needs root (per-session uids,
 * namespaces, nftables), as the runner's bwrap backend does.
 */
import { spawn } from "node:child_process";
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { barePtySpawnMs } from "./baselines.ts";
import { figure, percentile, type Figure } from "./stats.ts";
import {
  createNetworkPool,
  createSandboxNetworks,
  createUidAllocator,
  pidsOfUid,
  probeBwrap,
  spawnInSandbox,
  type BwrapCapability,
  type SandboxSpec,
  type SessionIds,
} from "../../services/runner-agent/src/sandbox/bwrap/index.ts";
import { hostRoot } from "../../services/runner-agent/src/sandbox/bwrap/host-root.ts";

const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const FIRST_UID = 140_000;

export async function sandboxBenches(opts: { samples: number }): Promise<Figure[]> {
  const cap = await probeBwrap({ uid: FIRST_UID + 999, gid: FIRST_UID + 999, path: PATH });
  if (!cap.works || !cap.tools || !cap.network.ip || !cap.network.nft) throw new Error(`bwrap sandbox unavailable: ${cap.reason ?? cap.network.reason ?? ""}`);
  const tools = cap.tools;
  const dataDir = mkdtempSync("/var/lib/paddock-bench-sandbox-");
  chmodSync(dataDir, 0o755);
  const uids = createUidAllocator({ first: FIRST_UID, count: 512, reserved: [0] });
  const networks = createSandboxNetworks({ ip: cap.network.ip, nft: cap.network.nft, instance: "bnch", prefix: [10, 212], sharedPorts: [8080] });
  await networks.start();
  try {
    const plain = await timed(opts.samples, () => exitOf(spawn("/bin/true")));
    const bare = await timed(opts.samples, () => exitOf(spawn(tools.bwrap, ["--ro-bind", "/", "/", "--", "/bin/true"])));
    // Each sample gives its uid back (the range is smaller than a full run's samples; round robin reuses it last).
    const noNet = await timed(opts.samples, (i) => runSession(cap, sessionSpec(dataDir, uids.allocate(`n${i}`), undefined, ["/bin/true"])).finally(() => uids.release(`n${i}`)));
    const netCreate: number[] = [];
    const netDestroy: number[] = [];
    const withNet = await timed(opts.samples, async (i) => {
      const ids = uids.allocate(`w${i}`);
      const t0 = performance.now();
      const net = await networks.create(ids.slot);
      await net.allow([8080]);
      netCreate.push(performance.now() - t0);
      await runSession(cap, sessionSpec(dataDir, ids, net.netnsPath, ["/bin/true"]));
      const t1 = performance.now();
      await net.destroy();
      netDestroy.push(performance.now() - t1);
      uids.release(`w${i}`);
    });
    // The runner's way: networks built ahead (network-pool.ts); a session takes one and allows its ports.
    const pool = createNetworkPool({ networks, size: 4, slots: 64, onError: (err) => { throw err; } });
    await pool.filled();
    const poolTake: number[] = [];
    const pooled: number[] = [];
    for (let i = 0; i < opts.samples; i++) {
      const spec = sessionSpec(dataDir, uids.allocate(`q${i}`), undefined, ["/bin/true"]);
      const t0 = performance.now();
      // The gateway relay and the egress proxy are runner-wide listeners (sharedPorts): nothing to allow per session.
      const net = await pool.take();
      poolTake.push(performance.now() - t0);
      await runSession(cap, { ...spec, netnsPath: net.netnsPath });
      pooled.push(performance.now() - t0);
      pool.release(net);
      uids.release(`q${i}`);
      // The next take finds a ready network and no teardown under way, as a runner between creates would (not timed).
      await new Promise((resolve) => setImmediate(resolve));
      await pool.idle();
    }
    const barePty = await barePtySpawnMs(["/bin/echo", "x"], opts.samples);
    const ptyFirst: number[] = [];
    for (let i = 0; i < opts.samples; i++) {
      const spec = sessionSpec(dataDir, uids.allocate(`p${i}`), undefined, ["/bin/echo", "x"], true);
      const t0 = performance.now();
      const net = await pool.take();
      await firstPtyOutput(cap, { ...spec, netnsPath: net.netnsPath });
      ptyFirst.push(performance.now() - t0);
      pool.release(net);
      uids.release(`p${i}`);
      await new Promise((resolve) => setImmediate(resolve));
      await pool.idle();
    }
    await pool.stop();
    const rssKb = await sandboxRssKb(cap, sessionSpec(dataDir, uids.allocate("rss"), undefined, ["/bin/sleep", "1000"]));
    const p50 = (s: number[]) => percentile(s, 50);
    const plainBase = { name: "plain spawn of /bin/true p50", value: p50(plain) };
    return [
      figure({ bench: "sandbox", metric: "bare bwrap spawn (ro /, no namespaces) p50", value: p50(bare), unit: "ms", baseline: plainBase }),
      figure({ bench: "sandbox", metric: "full launch, loopback-only network (bwrap --unshare-net) p50", value: p50(noNet), unit: "ms", baseline: { name: "bare bwrap p50", value: p50(bare) } }),
      figure({ bench: "sandbox", metric: "full launch, loopback-only network p99", value: percentile(noNet, 99), unit: "ms", baseline: { name: "bare bwrap p99", value: percentile(bare, 99) } }),
      figure({ bench: "sandbox", metric: "session network create (netns, veth, one nft allow) p50", value: p50(netCreate), unit: "ms" }),
      figure({ bench: "sandbox", metric: "session network destroy p50", value: p50(netDestroy), unit: "ms" }),
      figure({ bench: "sandbox", metric: "full launch building its network (create + allow + run + destroy) p50", value: p50(withNet), unit: "ms", baseline: { name: "bare bwrap p50", value: p50(bare) } }),
      figure({ bench: "sandbox", metric: "full launch building its network p99", value: percentile(withNet, 99), unit: "ms", baseline: { name: "bare bwrap p99", value: percentile(bare, 99) } }),
      figure({ bench: "sandbox", metric: "network from a warm pool (take) p50", value: p50(poolTake), unit: "ms" }),
      figure({ bench: "sandbox", metric: "full launch with a pooled network (take + run) p50", value: p50(pooled), unit: "ms", baseline: { name: "bare bwrap p50", value: p50(bare) } }),
      figure({ bench: "sandbox", metric: "full launch with a pooled network p99", value: percentile(pooled, 99), unit: "ms", baseline: { name: "bare bwrap p99", value: percentile(bare, 99) } }),
      figure({
        bench: "sandbox",
        // A cold launch: what a create pays only without a ready warm sandbox. The overhead goal is judged on the runner's creates (sandbox-runner.ts).
        metric: "PTY spawn to first output, sandboxed with a pooled network (cold launch) p50",
        value: p50(ptyFirst),
        unit: "ms",
        baseline: { name: "bare PTY p50", value: p50(barePty) },
      }),
      figure({ bench: "sandbox", metric: "RSS of a sandbox's own processes (bwrap outer + pid-ns init)", value: rssKb, unit: "KiB" }),
    ];
  } finally {
    await networks.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function timed(samples: number, op: (i: number) => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < samples; i++) {
    const start = performance.now();
    await op(i);
    out.push(performance.now() - start);
  }
  return out;
}

function exitOf(child: ReturnType<typeof spawn>): Promise<void> {
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code) => (code === 0 ? resolve() : reject(new Error(`exit ${code}`))));
  });
}

function sessionSpec(dataDir: string, ids: SessionIds, netnsPath: string | undefined, command: string[], tty = false): SandboxSpec {
  const dir = join(dataDir, `s${ids.uid}`);
  for (const d of [dir, join(dir, "ws"), join(dir, "home"), join(dir, "tmp")]) {
    mkdirSync(d, { recursive: true });
    chownSync(d, ids.uid, ids.gid);
  }
  return {
    sessionId: `s${ids.uid}`,
    uid: ids.uid,
    gid: ids.gid,
    root: hostRoot(),
    workspace: { host: join(dir, "ws"), path: join(dir, "ws") },
    home: { host: join(dir, "home"), path: "/home/session" },
    tmpDir: join(dir, "tmp"),
    hide: [dataDir],
    netnsPath,
    env: { PATH },
    cwd: join(dir, "ws"),
    command,
    rlimits: { processes: 256, openFiles: 1024, fileSizeBytes: 1 << 30 },
    tty,
  };
}

async function runSession(cap: BwrapCapability, spec: SandboxSpec): Promise<void> {
  const p = spawnInSandbox(spec, { tools: cap.tools!, onData: () => undefined });
  const exit = await p.exited;
  if (exit.exitCode !== 0) throw new Error(`sandboxed command failed: ${JSON.stringify(exit)}`);
}

function firstPtyOutput(cap: BwrapCapability, spec: SandboxSpec): Promise<void> {
  return new Promise((resolve) => {
    let seen = false;
    const p = spawnInSandbox(spec, {
      tools: cap.tools!,
      onData: () => {
        if (!seen) resolve();
        seen = true;
      },
    });
    void p.exited;
  });
}

/** Starts a sleeping session and sums the RSS of its bwrap processes (outer and pid-namespace init): the sandbox's own cost. */
async function sandboxRssKb(cap: BwrapCapability, spec: SandboxSpec): Promise<number> {
  let ready!: () => void;
  const started = new Promise<void>((resolve) => (ready = resolve));
  const p = spawnInSandbox({ ...spec, command: ["/bin/sh", "-c", "echo up; exec /bin/sleep 1000"] }, { tools: cap.tools!, onData: () => ready() });
  await started;
  let kb = 0;
  for (const pid of pidsOfUid(spec.uid, { live: true })) {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    if (!/^Name:\s+bwrap$/m.test(status)) continue;
    kb += Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? 0);
  }
  p.signal("SIGKILL");
  await p.exited;
  return kb;
}
