/**
 * The escape suite (issue #23 item 8) through the real stack: services with
 * their secrets as `npm run up` keeps them (0600 files in a data dir outside
 * /tmp, per-service NATS credentials), a bwrap runner, and two sessions in two
 * workspaces. From inside session A (its command, through the real API) the
 * escape battery tries the data dir, B's workspace and port, the services'
 * /proc/<pid>/environ, NATS on every address, writes outside its workspace,
 * a kill of every service process, A's token against B and for an admin token,
 * a memory hog (where the host offers session cgroups: killed at A's memory
 * limit), and a fork bomb held while B keeps answering and the runner starts a
 * new session. Every attempt fails; A's own work succeeds in the same run.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Session } from "@paddock/contracts";
import { escapeBattery, escapedOf, heldOf, repoRoot, startStack, type Stack } from "@paddock/testing";
import { CgroupKind, probeCgroup } from "../../services/runner-agent/src/sandbox/bwrap/cgroup-probe.ts";
import { api, sessionOf, Terminal } from "./helpers.ts";

// Clear of the ranges other tests use (testHostIds 150,000-230,000; sandbox-bwrap.test.ts 300,000-364,000).
const UID_FIRST = 400_000 + (process.pid % 1_000) * 32;
const B_PORT = 7000;
const FORK_LIMIT = 128;
/** The runner (a child of this process, in its cgroups) holds each session's memory where the host offers cgroups. */
const MEMORY_LIMITED = probeCgroup().kind !== CgroupKind.none;
const MEMORY_MAX_BYTES = 128 * 1024 ** 2;
let stack: Stack;
let parent: string;

beforeAll(async () => {
  // Outside /tmp (a session's /tmp is its own) and outside the host dirs sessions never see: what a session sees of it is the point.
  parent = join(repoRoot, ".data", `escape-${process.pid}`);
  mkdirSync(parent, { recursive: true });
  stack = await startStack({
    isolated: true,
    secretFiles: true,
    dataDirParent: parent,
    env: {
      "runner-agent": {
        PADDOCK_SANDBOX: "bwrap",
        PADDOCK_SANDBOX_UID_FIRST: String(UID_FIRST),
        PADDOCK_SANDBOX_UID_COUNT: "32",
        // The default (4,096) is the same RLIMIT_NPROC; a smaller one keeps the fork bomb from loading a shared test host.
        PADDOCK_SANDBOX_PROCESSES: String(FORK_LIMIT),
        PADDOCK_SANDBOX_MEMORY_MAX_BYTES: String(MEMORY_MAX_BYTES),
      },
    },
  });
});
afterAll(async () => {
  await stack?.stop();
  if (parent) rmSync(parent, { recursive: true, force: true });
});

const call = (method: string, path: string, body?: unknown) => api(stack.url, stack.token, method, path, body);

async function create(body: Record<string, unknown>): Promise<Session> {
  const res = await call("POST", "/v1/sessions", body);
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return sessionOf(res);
}

async function attach(id: string): Promise<Terminal> {
  return Terminal.open(stack.url, stack.token, id, "mode=controller&since=all");
}

/** The control plane's host processes: the services and everything of theirs that runs as this (the runner's) uid. */
function servicePids(): number[] {
  const roots = new Set([stack.scheduler, stack.recorder, stack.gateway, ...stack.runners].map((s) => s.process.pid ?? -1));
  if (stack.nats.process.pid !== undefined) roots.add(stack.nats.process.pid);
  const parentOf = new Map<number, number>();
  const mine = new Set<number>();
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, "utf8");
      parentOf.set(Number(e), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
      if (/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${e}/status`, "utf8"))?.[1] === String(process.getuid?.())) mine.add(Number(e));
    } catch {
      // exited meanwhile
    }
  }
  const below = (pid: number): boolean => roots.has(pid) || (parentOf.has(pid) && pid !== 1 && below(parentOf.get(pid) ?? 1));
  return [...mine].filter(below);
}

function find(dir: string, name: string): string | undefined {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isFile() && e.name === name) return dir;
    if (e.isDirectory()) {
      const hit = find(p, name);
      if (hit) return hit;
    }
  }
  return undefined;
}

describe("a hostile session on a bwrap runner of a real stack", () => {
  it("fails every escape, cannot starve the runner or another session, and does its own work", async () => {
    const files = stack.secretFiles;
    if (!files) throw new Error("stack without secret files");
    const secretValue = `b-secret-${process.pid}-value`;
    expect((await call("PUT", "/v1/secrets/B_SECRET", { value: secretValue })).status).toBe(204);
    const env = await call("POST", "/v1/environments", { name: "with-secret", secretRefs: ["B_SECRET"] });
    expect(env.status).toBe(201);

    // B: a secret in its env, a private file in its workspace, a listener on B_PORT, and an echo of what it is sent.
    // Both sessions take sandboxes the runner's warm pool started ahead (its FIFO is there, read-only): the battery runs against a warm start.
    const warmCheck = 'if [ -p /run/paddock/start ]; then echo STARTED:warm.; else echo STARTED:cold.; fi';
    const controlWrite = "if (echo x > /run/paddock/planted) 2>/dev/null; then echo ESCAPED:plant-in-control-dir; else echo HELD:plant-in-control-dir; fi";
    // Another terminal's master (the runner's PTYs, B's among them) held open by A: it could read B's screen and type into B.
    const otherTerminals = 'ls -l /proc/$$/fd > /tmp/fds; if grep -q ptmx /tmp/fds; then echo "ESCAPED:other-terminals $(grep ptmx /tmp/fds | tr -s " " | cut -d" " -f9- | tr "\\n" " ")"; else echo HELD:other-terminals; fi';
    const bScript = [
      warmCheck,
      `echo "b-private-${process.pid}" > b-private`,
      `socat TCP-LISTEN:${B_PORT},reuseaddr,fork SYSTEM:'echo from-b' &`,
      "echo \"B-IP:$(ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -1).\"",
      'echo B-READY.; while read -r l; do echo "B-ECHO:$l."; done',
    ].join("\n");
    const b = await create({ environmentId: (env.body as { id: string }).id, spec: { cmd: ["bash", "-c", bScript] } });
    const bTerm = await attach(b.id);
    await bTerm.until((t) => t.output().includes("B-READY."));
    const bAddress = /B-IP:([\d.]+)\./.exec(bTerm.output())?.[1] ?? "";
    expect(bAddress).toMatch(/^10\./);

    const runnerDataDir = join(stack.dataDir, "runner-1");
    const bWorkspace = find(runnerDataDir, "b-private") ?? "";
    expect(bWorkspace).not.toBe("");
    const pids = servicePids();
    // There is something to find: the runner's environment names its credentials file.
    expect(readFileSync(`/proc/${stack.runners[0]?.process.pid ?? 0}/environ`, "utf8")).toContain("PADDOCK_NATS_CREDS_FILE");
    const natsPort = Number(new URL(stack.nats.url.replace("nats://", "http://")).port);
    const hostAddresses = Object.values(networkInterfaces())
      .flat()
      .flatMap((i) => (i && i.family === "IPv4" && !i.internal ? [i.address] : []));
    const opsPorts = [stack.scheduler, stack.recorder, stack.gateway, ...stack.runners].map((s) => Number(s.ready.opsPort));
    const script = escapeBattery({
      dataDir: stack.dataDir,
      runnerDataDir,
      other: { sessionId: b.id, workspace: bWorkspace, address: bAddress, port: B_PORT },
      servicePids: pids,
      natsPort,
      hostAddresses,
      hostPorts: opsPorts,
      forkBomb: true,
      memoryHogBytes: MEMORY_LIMITED ? 4 * MEMORY_MAX_BYTES : undefined,
    });
    const a = await create({ spec: { cmd: ["bash", "-c", `${warmCheck}\n${controlWrite}\n${otherTerminals}\n${script}`] } });
    const aTerm = await attach(a.id);
    await aTerm.until((t) => t.output().includes("FORK-HOLDING."));

    // While A holds every process it may have: B answers, the runner is healthy and starts a new session.
    bTerm.ws.send(Buffer.from("still-here\n"), { binary: true });
    await bTerm.until((t) => t.output().includes("B-ECHO:still-here."));
    const health = await fetch(`http://127.0.0.1:${String(stack.runners[0]?.ready.opsPort)}/healthz`);
    expect(health.status).toBe(200);
    const c = await create({ spec: { cmd: ["bash", "-c", "echo C-RAN.; exec sleep 600"] } });
    const cTerm = await attach(c.id);
    await cTerm.until((t) => t.output().includes("C-RAN."));
    cTerm.ws.close();

    aTerm.ws.send(Buffer.from("release\n"), { binary: true });
    await aTerm.until((t) => t.output().includes("BATTERY-DONE."));
    const out = aTerm.output();
    aTerm.ws.close();
    bTerm.ws.close();

    expect(escapedOf(out)).toEqual([]);
    expect([out, bTerm.output()].map((o) => /STARTED:(\w+)\./.exec(o)?.[1])).toEqual(["warm", "warm"]);
    // A warm sandbox's control directory is the runner's and read-only: the session cannot plant anything there.
    expect(heldOf(out)).toContain("plant-in-control-dir");
    expect(heldOf(out)).toContain("other-terminals");
    const held = heldOf(out);
    for (const tag of ["read-dev-token", "read-session-token-secret", "read-secrets-key", "read-creds", "list-data-dir", "list-runner-data-dir"]) expect(held).toContain(tag);
    for (const tag of ["read-other-workspace", "list-other-workspace", "environ-any", "other-session-port", "token-read-other", "token-delete-other", "token-mint"]) expect(held).toContain(tag);
    if (MEMORY_LIMITED) expect(held).toContain("memory-hog");
    for (const p of pids) expect(held).toEqual(expect.arrayContaining([`environ-${p}`, `kill-${p}`]));
    expect(held.filter((h) => h.startsWith("nats-"))).toHaveLength(2 + hostAddresses.length);
    expect(held.filter((h) => h.startsWith("port-"))).toHaveLength(opsPorts.length * (2 + hostAddresses.length));
    expect(held.filter((h) => h.startsWith("write-"))).toHaveLength(6);
    // The limit, less what A's uid was running when it forked (bash, perl, what the runner runs as A's uid).
    expect(Number(/FORK-LIMIT:(\d+)/.exec(out)?.[1])).toBeGreaterThan(FORK_LIMIT - 8);
    expect(Number(/FORK-LIMIT:(\d+)/.exec(out)?.[1])).toBeLessThan(FORK_LIMIT);
    expect(out).toContain("FORK-RELEASED.");
    // Nothing secret reached A's output.
    const secrets = [stack.token, readFileSync(files.sessionTokenSecret, "utf8").trim(), readFileSync(files.secretsKey, "utf8").trim(), secretValue, `b-private-${process.pid}`];
    for (const pass of Object.values(stack.natsUsers ?? {})) secrets.push(pass);
    for (const s of secrets) expect(out).not.toContain(s);
    // Nothing was written outside A's workspace; every service still runs; B still exists.
    for (const f of ["/escape", "/etc/escape", "/usr/escape", join(stack.dataDir, "escape"), join(runnerDataDir, "escape"), join(bWorkspace, "escape")]) expect(existsSync(f)).toBe(false);
    for (const s of [stack.scheduler, stack.recorder, stack.gateway, ...stack.runners]) expect(s.process.exitCode).toBeNull();
    expect(sessionOf(await call("GET", `/v1/sessions/${b.id}`)).state).toBe("running");

    // A's own work: its workspace and itself through $PADDOCK_URL with $PADDOCK_TOKEN.
    expect(out).toContain("OWN:workspace=own-work");
    expect(out).toContain("OWN:self=200");
    expect(Number(/OWN:uid=(\d+)/.exec(out)?.[1])).toBeGreaterThanOrEqual(UID_FIRST);
    expect(readFileSync(join(find(runnerDataDir, "own.txt") ?? "", "own.txt"), "utf8")).toBe("own-work\n");
  });
});
