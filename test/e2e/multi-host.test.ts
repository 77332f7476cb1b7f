/**
 * Several hosts on one machine (issue 29 item 5): two runners, each in a
 * network namespace of its own behind a veth pair (net-hosts.ts), reach
 * nats-server and the gateway over that link, and the gateway dials the
 * runners' data planes back over it; no runner is in the root namespace. A
 * session on host A works end to end (terminal, exec, files, a preview).
 * Cutting A's link loses its lease and the session resumes on host B from its
 * checkpoint; when the link comes back A finds itself fenced, registers
 * again and tears its copy down, and the session stays on B, one live copy.
 *
 * The runners use the process backend: a session's processes are then in
 * its runner's namespace, so the namespace's process table says which host
 * runs a copy (bwrap would give each session a namespace of its own).
 */
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Headers, Runner, Subjects } from "@paddock/contracts";
import {
  createNetHosts,
  FAST_LIVENESS_ENV,
  establishedTcp,
  netHostsUnavailable,
  netnsInode,
  previewAppSpec,
  putPreviewApp,
  startStack,
  untilGone,
  untilSession,
  type NetHosts,
  type ServiceProcess,
  type Stack,
} from "@paddock/testing";
import { api, sessionOf, Terminal } from "./helpers.ts";

/** Short leases and fast sweeps: the cut plays out in seconds. Sessions run on the process backend (see the top). */
const FAST = {
  scheduler: {
    ...FAST_LIVENESS_ENV.scheduler,
    // No periodic checkpoints: the test's snapshot is the only one, so what B restores is exactly what it held.
    PADDOCK_CHECKPOINT_INTERVAL_MS: "0",
  },
  "runner-agent": { ...FAST_LIVENESS_ENV["runner-agent"], PADDOCK_SANDBOX: "process" },
};

/** In the app's command line, so the hosts' process tables show which copy is where. */
const MARK = `multihost-${process.pid}`;
/** Says whether this boot found the file written before the checkpoint, then ticks (its terminal output, and writes for the fence to refuse). */
const MAIN = `echo ${MARK} >/dev/null; if [ -f before.txt ]; then echo restored-$(cat before.txt); else echo first-boot; fi; i=0; while :; do echo tick$i; i=$((i+1)); sleep 0.2; done`;

const unavailable = netHostsUnavailable();
let hosts: NetHosts | undefined;
let stack: Stack | undefined;
let nc: NatsConnection | undefined;
afterAll(async () => {
  await nc?.drain().catch(() => undefined);
  // A runner cut off would drain into nothing on SIGTERM: give it its link back first (a failed run may leave it cut).
  hosts?.restore("a");
  await stack?.stop();
  hosts?.destroy();
});

const auth = (s: Stack) => ({ authorization: `Bearer ${s.token}` });

async function exec(s: Stack, id: string, script: string): Promise<{ exitCode: number | null; stdout: string }> {
  const res = await api(s.url, s.token, "POST", `/v1/sessions/${id}/exec`, { cmd: ["sh", "-c", script] });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as { exitCode: number | null; stdout: string };
}

async function readFile(s: Stack, id: string, path: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`${s.url}/v1/sessions/${id}/files?path=${path}`, { headers: auth(s) });
  return { status: res.status, text: await res.text() };
}

async function writeFile(s: Stack, id: string, path: string, body: string): Promise<void> {
  const res = await fetch(`${s.url}/v1/sessions/${id}/files?path=${path}`, { method: "PUT", headers: { ...auth(s), "content-type": "application/octet-stream" }, body });
  expect(res.status, await res.text()).toBe(200);
}

/** Copies of the session's main app in a host's namespace. */
const copiesOn = (h: NetHosts, host: string) => h.processes(host).filter((p) => p.args.includes(MARK) && /^(\S*\/)?sh -c /.test(p.args));

/** Resolves with the runner record once pred holds (a KV watch: every revision, no polling). */
async function untilRunner(conn: NatsConnection, key: string, pred: (r: Runner) => boolean): Promise<Runner> {
  const kv = await new Kvm(jetstream(conn)).open("runners");
  const w = await kv.watch({ key });
  try {
    for await (const e of w) {
      if (e.operation !== "PUT") continue;
      const r = Runner.parse(e.json());
      if (pred(r)) return r;
    }
  } finally {
    w.stop();
  }
  throw new Error(`watch of runner ${key} ended before the condition held`);
}

/** A log line of svc after the first `from` lines that matches pred. */
function logAfter(svc: ServiceProcess, from: number, pred: (l: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
  return svc.waitForLog((l) => svc.logs.indexOf(l) >= from && pred(l));
}

/** Every TERM message of the main app in order: generation and the runner its subject names. */
async function termLog(conn: NatsConnection, sessionId: string): Promise<Array<{ generation: number; runner: string }>> {
  const consumer = await jetstream(conn).consumers.get("TERM", { filter_subjects: [Subjects.termOfApp(sessionId, "main")], deliver_policy: DeliverPolicy.All });
  let pending = (await consumer.info()).num_pending;
  const out: Array<{ generation: number; runner: string }> = [];
  if (pending === 0) return out;
  for await (const m of await consumer.consume()) {
    // paddock.term.<pool>.<runner>.<session>.<app>
    out.push({ generation: Number(m.headers?.get(Headers.placementGeneration) ?? 0), runner: m.subject.split(".")[3] ?? "" });
    if (--pending === 0) break;
  }
  return out;
}


describe.skipIf(unavailable !== undefined)(`runners on hosts of their own${unavailable ? ` (skipped: ${unavailable})` : ""}`, () => {
  it("a session on host A works over the link; cut, it resumes on host B from its checkpoint; restored, A is fenced and tears its copy down", async () => {
    const h = (hosts = createNetHosts(["a", "b"]));
    const a = h.host("a");
    const b = h.host("b");
    // nats-server and the gateway listen on the bridge only: the runners have no other way to them.
    const s = (stack = await startStack({ runners: 0, listenHost: h.rootAddress, env: FAST }));
    const conn = (nc = await connect({ servers: s.nats.url }));
    const onHost = (host: typeof a, runnerId: string) =>
      s.addRunner({ runnerId, wrap: h.wrap(host.name), env: { PADDOCK_RUNNER_DATA_LISTEN: `${host.address}:0` } });
    const runnerA = await onHost(a, "runner-a");
    const pidA = runnerA.process.pid ?? 0;

    // The runner is in A's namespace and its NATS connection goes from A's address to the bridge.
    expect(establishedTcp(pidA).some((c) => c.local.startsWith(`${a.address}:`) && c.remote === `${h.rootAddress}:${String(s.nats.port)}`)).toBe(true);
    const dataPlane = await runnerA.waitForLog((l) => l.msg === "data plane listening");
    expect(dataPlane.host).toBe(a.address);

    const created = await api(s.url, s.token, "POST", "/v1/sessions", { spec: { apps: [{ name: "main", cmd: ["sh", "-c", MAIN] }, previewAppSpec("web", [{ port: 8000 }])] } });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const id = sessionOf(created).id;
    const first = await untilSession(conn, id, (x) => x.state === "running");
    expect(first).toMatchObject({ runnerId: "runner-a", placementGeneration: 1 });

    // Terminal: the app's output through the gateway.
    const viewer = await Terminal.open(s.url, s.token, id, "since=all&app=main");
    await viewer.until((t) => t.output().includes("first-boot") && t.output().includes("tick2"));

    // Files and exec: the exec'd command runs in A's namespace (the process backend shares the runner's).
    await writeFile(s, id, "before.txt", "v1");
    expect(await readFile(s, id, "before.txt")).toEqual({ status: 200, text: "v1" });
    const onA = await exec(s, id, "cat before.txt; echo; readlink /proc/self/ns/net");
    expect(onA.stdout).toBe(`v1\nnet:[${netnsInode(a.netns)}]\n`);

    // Preview: the gateway dials A's data plane over the veth (a connection from the bridge to A's
    // address while the body streams), and the bytes cross A's link.
    await putPreviewApp(s.url, s.token, id);
    const web = await Terminal.open(s.url, s.token, id, "since=all&app=web");
    await web.until((t) => t.output().includes("LISTENING 8000"));
    web.ws.close();
    const before = h.counters("a");
    const download = await fetch(`${s.url}/v1/sessions/${id}/ports/8000/big?mb=2`, { headers: auth(s) });
    expect(download.status).toBe(200);
    const reader = (download.body as ReadableStream<Uint8Array>).getReader();
    let bytes = (await reader.read()).value?.length ?? 0;
    expect(establishedTcp(process.pid).some((c) => c.local.startsWith(`${h.rootAddress}:`) && c.remote === `${a.address}:${String(dataPlane.port)}`)).toBe(true);
    for (let r = await reader.read(); !r.done; r = await reader.read()) bytes += r.value.length;
    expect(bytes).toBe(2 * 1024 * 1024);
    expect(h.counters("a").rx - before.rx).toBeGreaterThanOrEqual(2 * 1024 * 1024);

    // A checkpoint to resume from; a file written after it is not in it.
    const snap = await api(s.url, s.token, "POST", `/v1/sessions/${id}/snapshot`, {});
    expect(snap.status, JSON.stringify(snap.body)).toBe(200);
    await writeFile(s, id, "after.txt", "not in the checkpoint");
    expect(copiesOn(h, "a"), JSON.stringify(h.processes("a"))).toHaveLength(1);

    const runnerB = await onHost(b, "runner-b");
    const generationA = (await untilRunner(conn, "default.runner-a", () => true)).generation;

    // Cut A's link: the scheduler loses A's lease and resumes the session on B from the checkpoint.
    h.cut("a");
    await untilRunner(conn, "default.runner-a", (r) => r.state === "lost");
    const lease = await (await new Kvm(jetstream(conn)).open("runner-leases")).get("default.runner-a");
    expect(lease === null || lease.operation !== "PUT").toBe(true);
    const moved = await untilSession(conn, id, (x) => x.state === "running" && x.placementGeneration === 2);
    expect(moved.runnerId).toBe("runner-b");
    await viewer.until((t) => t.output().includes("restored-v1"));
    const onB = await exec(s, id, "cat before.txt; echo; test -e after.txt && echo after-present || echo after-absent; readlink /proc/self/ns/net");
    expect(onB.stdout).toBe(`v1\nafter-absent\nnet:[${netnsInode(b.netns)}]\n`);
    expect(await readFile(s, id, "before.txt")).toEqual({ status: 200, text: "v1" });
    // Cut off, A cannot know: its copy still runs (this is what the fence and the teardown are for).
    expect(copiesOn(h, "a")).toHaveLength(1);
    expect(copiesOn(h, "b")).toHaveLength(1);

    // Restore the link: A reads its record, finds itself lost, registers again in a new
    // generation and discards the copy the reply hands to its successor.
    const mark = runnerA.logs.length;
    h.restore("a");
    const reregistering = await logAfter(runnerA, mark, (l) => l.msg === "re-registering");
    expect(["lost", "generation", "reconnect"]).toContain(reregistering.reason);
    await logAfter(runnerA, mark, (l) => l.msg === "session discarded after re-registration" && l.sessionId === id);
    const rejoined = await untilRunner(conn, "default.runner-a", (r) => r.state !== "lost");
    expect(rejoined.generation).toBeGreaterThan(generationA);
    await untilGone(join(s.dataDir, "runner-a", "sessions", id));
    expect(copiesOn(h, "a")).toHaveLength(0);
    expect(copiesOn(h, "b")).toHaveLength(1);

    // The session stayed on B, and it still works there.
    const record = sessionOf(await api(s.url, s.token, "GET", `/v1/sessions/${id}`));
    expect(record).toMatchObject({ state: "running", runnerId: "runner-b", placementGeneration: 2 });
    expect((await exec(s, id, "readlink /proc/self/ns/net")).stdout).toBe(`net:[${netnsInode(b.netns)}]\n`);
    // Whatever A wrote after B took over was refused: from B's first chunk on, the log is B's alone.
    const log = await termLog(conn, id);
    const takeover = log.findIndex((m) => m.generation === 2);
    expect(takeover).toBeGreaterThan(0);
    expect(log.slice(0, takeover).every((m) => m.runner === "runner-a" && m.generation === 1)).toBe(true);
    expect(log.slice(takeover).every((m) => m.runner === "runner-b" && m.generation === 2)).toBe(true);
    viewer.ws.close();
    // Lost once, by the cut: neither when it first registered nor when it registered again
    // (before its first lease put reached the scheduler's watch).
    const lost = s.scheduler.logs.filter((l) => l.msg === "runner lost");
    expect(lost.map((l) => [l.runnerId, l.generation])).toEqual([["runner-a", generationA]]);
    expect(runnerB.process.exitCode).toBeNull();
  }, 300_000);
});
