/**
 * A session's lifecycle on each sandbox backend (issue 23 item 7, first
 * part): the same scenarios through a real agent on a real nats-server, once
 * with `process` and once with `bwrap` (namespaced, a uid of its own, a
 * network of its own). What differs between them is asserted per backend.
 */
import { DEFAULT_INIT_PATH } from "../config.ts";
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { DispatchCommand, PortableSpec, RunnerFact } from "@paddock/contracts";
import { provision } from "@paddock/bus";
import { startNatsServer, type NatsServerHandle } from "@paddock/testing";
import { testHostIds } from "../sandbox/bwrap/test-sandbox.ts";
import { pidsOfUid } from "../sandbox/bwrap/uid-allocator.ts";
import { DEFAULT_SANDBOX_LIMITS } from "../sandbox/bwrap/limits.ts";
import { CgroupKind, probeCgroup } from "../sandbox/bwrap/cgroup-probe.ts";
import { collectFacts, collectTerm, dispatchTo, eventually, fakeScheduler, testAgent, type TestAgent } from "../testing/test-support.ts";

let server: NatsServerHandle;
let nc: NatsConnection;
const agents: TestAgent[] = [];

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url });
  await provision(nc, { replicas: 1 });
});
afterAll(async () => {
  for (const t of agents) await t.agent.stop();
  await nc.drain();
  await server.stop();
});

/** The states (/proc status letter) of the live processes of uid. */
function statesOf(uid: number): string[] {
  return pidsOfUid(uid, { live: true }).map((pid) => /^State:\s+(\S)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? "?");
}

let counter = 0;
const nextId = () => `b${++counter}`;
/**
 * This file's sessions (several held at once, plus the warm pool) outgrew testHostIds' 16 uids: under a loaded
 * run their teardown lagged and a start failed with "no free session uid". A range of 64 in a region no other
 * test file allocates from (100,000–138,399; testHostIds starts at 150,000, the sandbox bench takes 141,000).
 */
const UID_COUNT = 64;
const uidFirstOf = (pid: number) => 100_000 + (pid % 600) * UID_COUNT;
/** A process limit small enough for a fork bomb to reach at once, large enough for every scenario here. */
const MAX_PROCESSES = 128;
const LIMITS = { ...DEFAULT_SANDBOX_LIMITS, rlimits: { ...DEFAULT_SANDBOX_LIMITS.rlimits, processes: MAX_PROCESSES }, cgroup: { ...DEFAULT_SANDBOX_LIMITS.cgroup, memoryMaxBytes: 256 * 1024 ** 2 } };
/** Where this host offers session cgroups (a delegated v2 subtree, or writable v1 hierarchies as on these VMs). */
const HOST_CGROUPS = probeCgroup();
const CGROUPS = HOST_CGROUPS.kind !== CgroupKind.none;

describe.each(["process", "bwrap"] as const)("a session on the %s backend", (backend) => {
  let t: TestAgent;
  let facts: ReturnType<typeof collectFacts>;
  // Not the ids sandbox-escape.test.ts takes in the same worker process (testHostIds(process.pid)): another uid range, instance and /16.
  const ids = testHostIds(process.pid + 2_501);
  beforeAll(async () => {
    // Passable by a session's uid: its bwrap binds its directories from below it.
    const dataDir = mkdtempSync(join(tmpdir(), "paddock-backends-"));
    chmodSync(dataDir, 0o711);
    const scheduler = fakeScheduler(nc, 0);
    t = testAgent(nc, {
      dataDir,
      capabilities: [],
      sandbox: { backend, hide: [], shared: [], uidFirst: uidFirstOf(process.pid + 2_501), uidCount: UID_COUNT, netInstance: ids.instance, netPrefix: ids.prefix, limits: LIMITS, init: DEFAULT_INIT_PATH },
    });
    agents.push(t);
    facts = collectFacts(nc, t.config.poolId, t.config.runnerId);
    await t.agent.start();
    scheduler.sub.unsubscribe();
    // Only bwrap roots sessions in images; what the runner enforces per session is in its capabilities too (cgroups only where the host offers them).
    const limits = backend === "bwrap" ? ["limits:rlimit", ...(CGROUPS ? ["limits:cgroup"] : [])] : [];
    expect(scheduler.requests.items[0]?.capabilities).toEqual(backend === "bwrap" ? ["sandbox:bwrap", "image:oci", ...limits] : ["sandbox:process"]);
  });

  const fact = <T extends RunnerFact["type"]>(sessionId: string, type: T, pred?: (f: Extract<RunnerFact, { type: T }>) => boolean) =>
    facts.waitFor((f) => f.sessionId === sessionId && f.type === type && (!pred || pred(f as never))) as Promise<Extract<RunnerFact, { type: T }>>;
  const start = (sessionId: string, spec: PortableSpec, extra: Partial<Extract<DispatchCommand, { type: "start" }>> = {}) =>
    dispatchTo(nc, t, { type: "start", sessionId, workspaceId: "ws1", runnerGeneration: t.agent.generation, placementGeneration: 1, spec, mode: "run", trigger: "initial", ...extra } as DispatchCommand);
  const send = (cmd: Record<string, unknown> & { type: DispatchCommand["type"]; sessionId: string }) =>
    dispatchTo(nc, t, { workspaceId: "ws1", runnerGeneration: t.agent.generation, placementGeneration: 1, ...cmd } as DispatchCommand);

  it("runs an app on a PTY as the backend's user, with the workspace as cwd and HOME", async () => {
    const sessionId = nextId();
    const term = collectTerm(nc, sessionId, "main");
    await start(sessionId, { cmd: ["sh", "-c", 'echo "uid=$(id -u) tty=$(tty) cwd=$(pwd) home=$HOME."; test -t 0 && echo on-a-tty; test -p /run/paddock/start && echo warm-started; exit 0'] });
    expect(await fact(sessionId, "exited")).toMatchObject({ exitCode: 0 });
    const uid = Number(/uid=(\d+) /.exec(term.text())?.[1]);
    expect(term.text()).toContain("on-a-tty");
    const cwd = /cwd=(\S+) /.exec(term.text())?.[1];
    expect(term.text()).toContain(`home=${cwd}.`);
    if (backend === "bwrap") {
      expect(uid).toBeGreaterThanOrEqual(uidFirstOf(process.pid + 2_501));
      expect(uid).toBeLessThan(uidFirstOf(process.pid + 2_501) + UID_COUNT);
      expect(cwd).toBe("/home/workspace");
      // The runner's first session takes a sandbox its warm pool started ahead (the waiter's FIFO is there, read-only).
      expect(term.text()).toContain("warm-started");
    } else {
      expect(uid).toBe(process.getuid?.());
      expect(cwd).toBe(join(t.config.dataDir, "sessions", sessionId, "workspace"));
    }
  });

  it("warm suspend stops the session's processes (bwrap's outer one spared) and resume continues them", async () => {
    const sessionId = nextId();
    const term = collectTerm(nc, sessionId, "main");
    await start(sessionId, { cmd: ["sh", "-c", 'sleep 600 & echo "uid=$(id -u)."; wait'] });
    await term.waitFor(() => /uid=\d+\./.test(term.text()));
    const uid = Number(/uid=(\d+)\./.exec(term.text())?.[1]);
    await send({ type: "suspend", sessionId, requestId: "w1", warm: true });
    expect(await fact(sessionId, "suspended")).toMatchObject({ warm: true });
    if (backend === "bwrap") {
      // sh, sleep (forked before the line that says uid) and the pid namespace's init stopped; bwrap's outer process (the PTY's child) is not.
      await eventually(() => statesOf(uid).filter((s) => s === "T").length === 3, () => `states ${statesOf(uid).join(",")}`);
      expect(statesOf(uid).filter((s) => s !== "T")).toHaveLength(1);
    }
    await send({ type: "resume", sessionId, requestId: "w2" });
    await fact(sessionId, "resumed");
    if (backend === "bwrap") await eventually(() => !statesOf(uid).includes("T"), () => `states ${statesOf(uid).join(",")}`);
    await send({ type: "destroy", sessionId });
    await fact(sessionId, "destroyed");
  });

  it("cold suspend checkpoints the workspace; a resume restores it for the session to write again", async () => {
    const sessionId = nextId();
    const term = collectTerm(nc, sessionId, "main");
    await start(sessionId, { cmd: ["sh", "-c", "echo before > note.txt; echo ready; exec sleep 600"] });
    await term.waitFor(() => term.text().includes("ready"));
    await send({ type: "suspend", sessionId, requestId: "c1", warm: false });
    const suspended = await fact(sessionId, "suspended");
    if (suspended.type !== "suspended" || !suspended.checkpoint) throw new Error("expected a cold checkpoint");
    expect(existsSync(join(t.config.dataDir, "sessions", sessionId))).toBe(false);
    const resumed = collectTerm(nc, sessionId, "main");
    await start(sessionId, { cmd: ["sh", "-c", "cat note.txt && echo after >> note.txt && cat note.txt; exit 0"] }, { placementGeneration: 2, trigger: "resume", restore: suspended.checkpoint, restoreKey: suspended.sealKey });
    expect(await fact(sessionId, "exited", (f) => f.placementGeneration === 2)).toMatchObject({ exitCode: 0 });
    expect(resumed.text()).toContain("before\r\nbefore\r\nafter");
  });

  it("runs setup and init in the sandbox, snapshots setup's workspace, and boots a second session from it", async () => {
    const env = { environmentId: "env-b", setupHash: `h-${backend}`, setup: "echo built > built.txt", init: "echo booted >> built.txt", secretRefs: [] };
    const first = nextId();
    const term1 = collectTerm(nc, first, "main");
    await start(first, { cmd: ["sh", "-c", "cat built.txt; exit 0"] }, { environment: env });
    const snap = await fact(first, "env_snapshot");
    if (snap.type !== "env_snapshot") throw new Error("unreachable");
    expect(await fact(first, "exited")).toMatchObject({ exitCode: 0 });
    expect(term1.text()).toContain("built\r\nbooted");
    const second = nextId();
    const term2 = collectTerm(nc, second, "main");
    // The snapshot (taken before init) was restored by the runner: the session owns what it restored, so init can append to it.
    await start(second, { cmd: ["sh", "-c", "cat built.txt; exit 0"] }, { environment: { ...env, snapshot: snap.checkpoint, snapshotKey: snap.sealKey } });
    const ended = await facts.waitFor((f) => f.sessionId === second && (f.type === "exited" || f.type === "failed"));
    expect(ended).toMatchObject({ type: "exited", exitCode: 0 });
    expect(term2.text()).toContain("built\r\nbooted");
  });

  it("fails a session naming an image it cannot have with a clean reason: refused on process, the registry unreachable on bwrap", async () => {
    const sessionId = nextId();
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    await start(sessionId, { image: "127.0.0.1:1/paddock/none:1", cmd: ["sh", "-c", "echo ran-on-the-host"] });
    const failed = await fact(sessionId, "failed");
    expect(failed.reason).toBe(backend === "process" ? "image 127.0.0.1:1/paddock/none:1: this runner's sandbox (process) cannot run images" : "image 127.0.0.1:1/paddock/none:1: 127.0.0.1:1 could not be reached");
  });

  it("reports an app whose command does not exist as failed with a clean reason", async () => {
    const sessionId = nextId();
    await start(sessionId, { cmd: ["no-such-command-here"] });
    expect(await fact(sessionId, "failed")).toMatchObject({ reason: "app main: command not found: no-such-command-here" });
  });

  it("reaches the network through its egress proxy; directly only on process (advisory there, enforced on bwrap)", async () => {
    const server = createServer((_req, res) => res.end("hello"));
    await new Promise<void>((resolve) => server.listen(0, "0.0.0.0", resolve));
    const port = (server.address() as AddressInfo).port;
    try {
      const sessionId = nextId();
      const term = collectTerm(nc, sessionId, "main");
      const script = [
        `echo "proxied:$(curl -s -m 5 http://127.0.0.1:${port}/)."`,
        `echo "refused:$(curl -s -m 5 -o /dev/null -w %{http_code} http://localhost:${port}/)."`,
        // The proxy's own address, without the proxy: the host's port beside it.
        'H=${HTTP_PROXY#http://}; H=${H%%:*}',
        `echo "direct:$(curl -s -m 5 --noproxy '*' http://$H:${port}/ || echo none)."`,
      ].join("; ");
      await start(sessionId, { cmd: ["sh", "-c", `${script}; exit 0`], egressAllow: ["127.0.0.1"] });
      expect(await fact(sessionId, "exited")).toMatchObject({ exitCode: 0 });
      expect(term.text()).toContain("proxied:hello.");
      expect(term.text()).toContain("refused:403.");
      expect(term.text()).toContain(backend === "bwrap" ? "direct:none." : "direct:hello.");
    } finally {
      server.close();
    }
  });

  it.runIf(backend === "bwrap")("reaches its gateway relay and egress proxy without a per-session nft rule (the link's shared ports)", async () => {
    const sessionId = nextId();
    const term = collectTerm(nc, sessionId, "main");
    // The proxy answers (403 for a host not on the list) when the link lets its port through.
    await start(sessionId, { cmd: ["sh", "-c", 'echo "proxy:$(curl -s -m 5 -o /dev/null -w %{http_code} http://example.invalid/)."; exec sleep 600'] });
    await term.waitFor(() => /proxy:\d+\./.test(term.text()));
    expect(term.text()).toContain("proxy:403.");
    // Nothing was added for the session on its way to running: no `nft` run on the create path.
    const set = execFileSync("nft", ["list", "set", "inet", `paddock_${ids.instance}`, "allowed"], { encoding: "utf8" });
    expect(set).not.toContain("elements");
    await send({ type: "destroy", sessionId });
    await fact(sessionId, "destroyed");
  });

  it("runs a tty:false app with pipes, each chunk tagged with its stream", async () => {
    const sessionId = nextId();
    const term = collectTerm(nc, sessionId, "main");
    await start(sessionId, { apps: [{ name: "main", cmd: ["sh", "-c", "echo out; echo err >&2; exit 3"], tty: false }] });
    expect(await fact(sessionId, "exited")).toMatchObject({ exitCode: 3 });
    expect(term.text()).toContain("out");
    expect(term.text()).toContain("err");
  });

  it("destroy leaves nothing running, not even a process that left its app's group", async () => {
    const sessionId = nextId();
    const term = collectTerm(nc, sessionId, "main");
    await start(sessionId, { cmd: ["sh", "-c", 'setsid sleep 600 & echo "uid=$(id -u)."; exec sleep 600'] });
    await term.waitFor(() => /uid=\d+\./.test(term.text()));
    const uid = Number(/uid=(\d+)\./.exec(term.text())?.[1]);
    await send({ type: "destroy", sessionId });
    await fact(sessionId, "destroyed");
    expect(existsSync(join(t.config.dataDir, "sessions", sessionId))).toBe(false);
    if (backend === "bwrap") expect(pidsOfUid(uid, { live: true })).toEqual([]);
  });

  it.runIf(backend === "bwrap")("bounds a fork bomb by the configured process limit; the runner and another session keep working", async () => {
    const bombId = nextId();
    const bombTerm = collectTerm(nc, bombId, "main");
    // The subshell forks until the kernel refuses (dash gives up at once), then holds what it got: "full." says the limit is reached.
    await start(bombId, { cmd: ["sh", "-c", 'echo "uid=$(id -u)."; (i=0; while true; do sleep 1000 & i=$((i+1)); echo $i > /tmp/forked; done); echo "full=$(cat /tmp/forked)."; exec sleep 1000'] });
    await bombTerm.waitFor(() => /full=\d+\./.test(bombTerm.text()));
    const uid = Number(/uid=(\d+)\./.exec(bombTerm.text())?.[1]);
    const forked = Number(/full=(\d+)\./.exec(bombTerm.text())?.[1]);
    expect(forked).toBeGreaterThan(10);
    expect(forked).toBeLessThan(MAX_PROCESSES);
    expect(pidsOfUid(uid).length).toBeLessThanOrEqual(MAX_PROCESSES);
    // While the bomb holds every process it could get, another session starts, runs and exits through the same runner.
    const otherId = nextId();
    const otherTerm = collectTerm(nc, otherId, "main");
    await start(otherId, { cmd: ["sh", "-c", "echo other-works; exit 0"] });
    expect(await fact(otherId, "exited")).toMatchObject({ exitCode: 0 });
    expect(otherTerm.text()).toContain("other-works");
    await send({ type: "destroy", sessionId: bombId });
    await fact(bombId, "destroyed");
    expect(pidsOfUid(uid, { live: true })).toEqual([]);
  });

  it.runIf(backend === "bwrap")("meters a piped app's child that left for a session of its own, by the session's uid", async () => {
    const sessionId = nextId();
    const term = collectTerm(nc, sessionId, "main");
    // The child burns CPU in a new session (out of the app's process group), says how much (`times`, run in the shell itself, not a
    // subshell: its own user and system time), and stays alive so the last sample at destroy sees it.
    const child = 'i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; times > /tmp/times; read t < /tmp/times; echo "burnt $t."; exec sleep 600';
    await start(sessionId, { apps: [{ name: "main", cmd: ["sh", "-c", `setsid sh -c '${child}' & exec sleep 600`], tty: false }] });
    await term.waitFor(() => /burnt .*\./.test(term.text()));
    const [user, sys] = [...(/burnt (\S+) (\S+)\./.exec(term.text()) ?? [])].slice(1).map(shellSeconds);
    const burnt = (user ?? 0) + (sys ?? 0);
    expect(burnt).toBeGreaterThan(0.1);
    await send({ type: "destroy", sessionId });
    const destroyed = await fact(sessionId, "destroyed");
    // /proc counts in clock ticks (10 ms): the meter sees at least what the child says it used, less a tick of rounding.
    expect(destroyed.usage?.cpuTimeSeconds ?? 0).toBeGreaterThanOrEqual(burnt - 0.01);
  });

  it.runIf(backend === "bwrap" && CGROUPS)("starts a session in cgroups of its own with the configured limits, removed with it", async () => {
    const sessionId = nextId();
    const term = collectTerm(nc, sessionId, "main");
    await start(sessionId, { cmd: ["sh", "-c", 'echo "uid=$(id -u)."; exec sleep 600'] });
    await term.waitFor(() => /uid=\d+\./.test(term.text()));
    const uid = Number(/uid=(\d+)\./.exec(term.text())?.[1]);
    const pids = pidsOfUid(uid, { live: true });
    const dirs = sessionCgroups(uid);
    for (const d of dirs) expect(readFileSync(join(d, "cgroup.procs"), "utf8").split("\n")).toEqual(expect.arrayContaining(pids.map(String)));
    const v1 = HOST_CGROUPS.kind === CgroupKind.v1;
    expect(cgroupValue(dirs, v1 ? "memory.limit_in_bytes" : "memory.max")).toBe(String(LIMITS.cgroup.memoryMaxBytes));
    expect(cgroupValue(dirs, "pids.max")).toBe(String(LIMITS.cgroup.pidsMax));
    expect(cgroupValue(dirs, v1 ? "cpu.cfs_quota_us" : "cpu.max")).toBe(v1 ? String(LIMITS.cgroup.cpuMaxMicros) : `${LIMITS.cgroup.cpuMaxMicros} 100000`);
    await send({ type: "destroy", sessionId });
    await fact(sessionId, "destroyed");
    for (const d of dirs) expect(existsSync(d)).toBe(false);
  });

  it.runIf(backend === "bwrap" && CGROUPS)("kills a memory hog by the OOM killer at the session's memory limit; the runner and another session keep working", async () => {
    const heldId = nextId();
    const heldTerm = collectTerm(nc, heldId, "main");
    await start(heldId, { cmd: ["sh", "-c", 'echo "uid=$(id -u)."; exec sleep 600'] });
    await heldTerm.waitFor(() => /uid=\d+\./.test(heldTerm.text()));
    const hogId = nextId();
    const hogTerm = collectTerm(nc, hogId, "main");
    // Four times the session's memory limit (256 MiB) in one string; the shell says how perl ended.
    await start(hogId, { cmd: ["sh", "-c", `echo "uid=$(id -u)."; perl -e '$x = "a" x (1024 * 1024 * 1024); print "survived\\n"'; echo "hog=$?."; exec sleep 600`] });
    await hogTerm.waitFor(() => /hog=\d+\./.test(hogTerm.text()));
    expect(hogTerm.text()).toContain("hog=137."); // SIGKILL: the session's cgroup counts it as its OOM kill
    const oom = HOST_CGROUPS.kind === CgroupKind.v1 ? "memory.oom_control" : "memory.events";
    const uidOf = (text: string) => Number(/uid=(\d+)\./.exec(text)?.[1]);
    expect(cgroupValue(sessionCgroups(uidOf(hogTerm.text())), oom)).toMatch(/^oom_kill [1-9]/m);
    expect(cgroupValue(sessionCgroups(uidOf(heldTerm.text())), oom)).toMatch(/^oom_kill 0$/m);
    // The other session's process lives on; the runner starts, runs and ends a new one.
    expect(pidsOfUid(Number(/uid=(\d+)\./.exec(heldTerm.text())?.[1]), { live: true }).length).toBeGreaterThan(0);
    const otherId = nextId();
    await start(otherId, { cmd: ["sh", "-c", "exit 0"] });
    expect(await fact(otherId, "exited")).toMatchObject({ exitCode: 0 });
    for (const id of [hogId, heldId]) {
      await send({ type: "destroy", sessionId: id });
      await fact(id, "destroyed");
    }
  });

  it.runIf(backend === "bwrap" && CGROUPS)("meters the CPU time of an app that ended between samples, by the session's cgroup", async () => {
    const sessionId = nextId();
    const term = collectTerm(nc, sessionId, "burner");
    // The burner says how much CPU it used (`times` in the shell itself) and ends long before the first sample (every 5 s): once its
    // sandbox is reaped /proc has nothing of it (whether anything is left at destroy is a race), the session's cgroup counts it.
    const burn = 'i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; times > /tmp/times; read t < /tmp/times; echo "burnt $t."';
    await start(sessionId, { apps: [{ name: "main", cmd: ["sh", "-c", "exec sleep 600"] }, { name: "burner", cmd: ["sh", "-c", burn], tty: false }] });
    await fact(sessionId, "app", (f) => f.app === "burner" && f.durationMs !== undefined);
    // Its output and its end travel apart (TERM stream, facts): the line may come after the fact.
    await term.waitFor(() => /burnt \S+ \S+\./.test(term.text()));
    const [user, sys] = [...(/burnt (\S+) (\S+)\./.exec(term.text()) ?? [])].slice(1).map(shellSeconds);
    const burnt = (user ?? 0) + (sys ?? 0);
    expect(burnt).toBeGreaterThan(0.1);
    await send({ type: "destroy", sessionId });
    const destroyed = await fact(sessionId, "destroyed");
    expect(destroyed.usage?.cpuTimeSeconds ?? 0).toBeGreaterThanOrEqual(burnt - 0.01);
  });

  /**
   * The cgroup directories (cgroup.ts's layout, one per hierarchy) holding the processes of the session running as
   * uid: named by its hold's key, the session id on a cold create and the warm entry's on a warm one.
   */
  const sessionCgroups = (uid: number) => {
    const pids = new Set(pidsOfUid(uid, { live: true }).map(String));
    return HOST_CGROUPS.hierarchies.flatMap((h) => {
      const base = HOST_CGROUPS.kind === CgroupKind.v1 ? join(h.dir, `paddock-${ids.instance}`) : h.dir;
      const dirs = readdirSync(base).map((d) => join(base, d)).filter((d) => existsSync(join(d, "cgroup.procs")));
      return dirs.filter((d) => readFileSync(join(d, "cgroup.procs"), "utf8").split("\n").some((pid) => pids.has(pid)));
    });
  };
});

/** The text of the file name in whichever of dirs has it. */
function cgroupValue(dirs: readonly string[], name: string): string {
  const file = dirs.map((d) => join(d, name)).find(existsSync);
  if (!file) throw new Error(`no ${name} in ${dirs.join(", ")}`);
  return readFileSync(file, "utf8").trim();
}

/** dash's `times` prints durations as e.g. 0m1.23s. */
function shellSeconds(text: string): number {
  const m = /^(\d+)m([\d.]+)s$/.exec(text);
  return m ? Number(m[1]) * 60 + Number(m[2]) : Number.NaN;
}
