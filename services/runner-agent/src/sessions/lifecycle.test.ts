import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Registry } from "prom-client";
import { Objm } from "@nats-io/obj";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { FleetRpc, Headers, MANIFEST_FORMAT, ObjectStores, RunnerActivity, runnerObjectStore, Subjects, type BootEnvironment, type DispatchCommand, type PortableSpec, type RunnerFact, type SessionSecretsRequest as FleetRpcRequest } from "@paddock/contracts";
import { createBusMetrics, decodeJson, provision, serveRpc } from "@paddock/bus";
import { newSealKey, SEALED_ARCHIVE_FORMAT, SEALED_TAR_FORMAT } from "@paddock/archive";
import { createLogger, silentLogger } from "@paddock/logging";
import { useNatsServer } from "@paddock/testing/vitest";
import type { AgentConfig } from "../agent.ts";
import { RpcSecretResolver } from "./secrets.ts";
import { Collector, collectFacts, collectTerm, counterValue, dispatchTo, eventually, fakeScheduler, maliciousTar, sealBytes, stillRuns, tarEntry, testAgent, hostPidOf, TEST_SANDBOX, type TestAgent } from "../testing/test-support.ts";

const nats = useNatsServer();
const agents: TestAgent[] = [];

beforeAll(() => provision(nats.nc, { replicas: 1 }));
// Before the server stops: after-all hooks run last-registered first.
afterAll(async () => {
  for (const t of agents) await t.agent.stop();
});

let counter = 0;
const nextId = (prefix = "l") => `${prefix}${++counter}`;

interface Harness {
  t: TestAgent;
  facts: ReturnType<typeof collectFacts>;
  /** Resolves with the first fact of this session matching type (and pred). */
  fact<T extends RunnerFact["type"]>(sessionId: string, type: T, pred?: (f: Extract<RunnerFact, { type: T }>) => boolean): Promise<Extract<RunnerFact, { type: T }>>;
  start(sessionId: string, spec: PortableSpec, extra?: Partial<Extract<DispatchCommand, { type: "start" }>>): Promise<void>;
  send(cmd: Record<string, unknown> & { type: DispatchCommand["type"]; sessionId: string }): Promise<void>;
}

async function harness(overrides: Partial<AgentConfig> = {}, log?: ReturnType<typeof createLogger>, extra: Parameters<typeof testAgent>[3] = {}): Promise<Harness> {
  const scheduler = fakeScheduler(nats.nc, 0);
  const t = testAgent(nats.nc, overrides, log, extra);
  agents.push(t);
  const facts = collectFacts(nats.nc, t.config.poolId, t.config.runnerId);
  await t.agent.start();
  scheduler.sub.unsubscribe();
  const base = () => ({ workspaceId: "ws1", runnerGeneration: t.agent.generation });
  return {
    t,
    facts,
    fact: (sessionId, type, pred) =>
      facts.waitFor((f) => f.sessionId === sessionId && f.type === type && (!pred || pred(f as never))) as never,
    start: (sessionId, spec, extra = {}) =>
      dispatchTo(nats.nc, t, { type: "start", sessionId, ...base(), placementGeneration: 1, spec, mode: "run", trigger: "initial", ...extra } as DispatchCommand),
    send: (cmd) => dispatchTo(nats.nc, t, { ...base(), placementGeneration: 1, ...cmd } as DispatchCommand),
  };
}

/** Fields of /proc/<pid>/stat after "(comm) ": state, ppid, pgrp, ... */
function procStat(pid: number): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

function procState(pid: number): string {
  return procStat(pid)[0] ?? "";
}

function sendInput(t: TestAgent, sessionId: string, body: string, generation = "1") {
  const h = natsHeaders();
  h.set(Headers.inputKind, "data");
  h.set(Headers.controllerGeneration, generation);
  nats.nc.publish(Subjects.input(t.config.poolId, t.config.runnerId, sessionId, "main"), body, { headers: h });
}

/**
 * Prints its pid, then a counter. Node rather than a shell loop: dash forks
 * each `sleep` with vfork, and a parent caught waiting on a stopped vfork
 * child shows state D, not T.
 */
const counterApp = [process.execPath, "-e", "console.log('pid=' + process.pid); let i = 0; setInterval(() => console.log('n=' + ++i), 20);"];
const lastCount = (text: string) => Math.max(0, ...[...text.matchAll(/n=(\d+)/g)].map((m) => Number(m[1])));

describe("suspend, resume, checkpoint", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await harness();
  });

  it("warm suspend stops the process group in place and resume continues it", async () => {
    const sessionId = nextId();
    const term = collectTerm(nats.nc, sessionId, "main");
    await h.start(sessionId, { cmd: counterApp });
    await term.waitFor(() => /pid=\d+/.test(term.text()) && lastCount(term.text()) > 0);
    const pid = hostPidOf(h.t, sessionId, Number(/pid=(\d+)/.exec(term.text())?.[1]));
    await h.send({ type: "suspend", sessionId, requestId: "w1", warm: true });
    expect(await h.fact(sessionId, "suspended")).toMatchObject({ warm: true });
    let seen = "";
    await eventually(() => (seen = procState(pid)) === "T", () => `app stopped (state ${seen}, output ${term.text().slice(-40)})`);
    await h.send({ type: "suspend", sessionId, requestId: "w2", warm: true });
    expect(await h.fact(sessionId, "refused", (f) => f.requestId === "w2")).toMatchObject({ reason: "session is already suspended" });
    await h.send({ type: "resume", sessionId, requestId: "w3" });
    await h.fact(sessionId, "resumed");
    expect(procState(pid)).not.toBe("T");
    const atResume = lastCount(term.text());
    await term.waitFor(() => lastCount(term.text()) > atResume);
    await h.send({ type: "resume", sessionId, requestId: "w4" });
    expect(await h.fact(sessionId, "refused", (f) => f.requestId === "w4")).toMatchObject({ reason: "session is not suspended" });
  });

  it("cold suspend checkpoints, removes the sandbox without an exit, and a resume start restores the workspace", async () => {
    const sessionId = nextId();
    const term = collectTerm(nats.nc, sessionId, "main");
    await h.start(sessionId, { cmd: ["sh", "-c", "echo before-suspend > note.txt; echo ready; exec sleep 600"] });
    await term.waitFor(() => term.text().includes("ready"));
    await h.send({ type: "suspend", sessionId, requestId: "c1", warm: false });
    const suspended = await h.fact(sessionId, "suspended");
    const name = `ws1/${sessionId}/1-c1`;
    // In the runner's own store, which only it may write.
    const own = runnerObjectStore(ObjectStores.checkpoints, h.t.config.poolId, h.t.config.runnerId);
    expect(suspended).toMatchObject({ warm: false, checkpoint: { ref: `${own}/${name}`, format: MANIFEST_FORMAT, capabilities: ["portable"] } });
    if (suspended.type !== "suspended" || !suspended.checkpoint || !suspended.sealKey) throw new Error("expected a sealed cold checkpoint");
    const os = await new Objm(nats.nc).open(own);
    expect((await os.info(name))?.size).toBeGreaterThan(0);
    expect(existsSync(join(h.t.config.dataDir, "sessions", sessionId))).toBe(false);
    // Commands for the suspended placement are refused now.
    await h.send({ type: "checkpoint", sessionId, requestId: "c2" });
    await h.fact(sessionId, "refused", (f) => f.requestId === "c2");

    // Without its key, or with another, the checkpoint does not open.
    await h.start(sessionId, { cmd: ["true"] }, { placementGeneration: 2, trigger: "resume", restore: suspended.checkpoint });
    expect(await h.fact(sessionId, "failed", (f) => f.placementGeneration === 2)).toMatchObject({ reason: "restore failed: checkpoint key missing" });
    await h.start(sessionId, { cmd: ["true"] }, { placementGeneration: 3, trigger: "resume", restore: suspended.checkpoint, restoreKey: newSealKey().toString("base64") });
    expect((await h.fact(sessionId, "failed", (f) => f.placementGeneration === 3)).reason).toMatch(/^restore failed: /);

    const resumed = collectTerm(nats.nc, sessionId, "main");
    await h.start(sessionId, { cmd: ["sh", "-c", "cat note.txt; exit 0"] }, { placementGeneration: 4, trigger: "resume", restore: suspended.checkpoint, restoreKey: suspended.sealKey });
    const exited = await h.fact(sessionId, "exited");
    expect(exited).toMatchObject({ placementGeneration: 4, exitCode: 0 });
    expect(resumed.text()).toContain("before-suspend");
    const run = await h.fact(sessionId, "app", (f) => f.placementGeneration === 4);
    expect(run.run).toMatchObject({ generation: 1, phase: "running", trigger: "resume" });
    // Placement 1 never reported an exit, and its log never got a marker.
    expect(h.facts.items.filter((f) => f.sessionId === sessionId && f.type === "exited").map((f) => f.placementGeneration)).toEqual([4]);
    expect(term.items.filter((m) => m.generation === "1" && m.exitCode !== undefined)).toHaveLength(0);
  });

  it("a snapshot leaves the app running", async () => {
    const sessionId = nextId();
    const term = collectTerm(nats.nc, sessionId, "main");
    await h.start(sessionId, { cmd: ["cat"] });
    await h.fact(sessionId, "running");
    await h.send({ type: "checkpoint", sessionId, requestId: "snap1" });
    const snap = await h.fact(sessionId, "checkpointed");
    expect(snap).toMatchObject({ requestId: "snap1", checkpoint: { ref: `${runnerObjectStore(ObjectStores.checkpoints, h.t.config.poolId, h.t.config.runnerId)}/ws1/${sessionId}/1-snap1` } });
    sendInput(h.t, sessionId, "still-here\r");
    await term.waitFor(() => term.text().includes("still-here"));
    expect(h.facts.items.some((f) => f.sessionId === sessionId && f.type === "exited")).toBe(false);
  });

  it("restart_app runs generation 2 with trigger manual, facts in order", async () => {
    const sessionId = nextId();
    await h.start(sessionId, { apps: [{ name: "main", cmd: ["sh", "-c", "echo up; exec sleep 600"] }, { name: "side", cmd: ["sleep", "600"] }] });
    await h.fact(sessionId, "app", (f) => f.app === "main" && f.run.generation === 1);
    await h.send({ type: "restart_app", sessionId, requestId: "r1", app: "main", trigger: "manual" });
    await h.fact(sessionId, "app", (f) => f.app === "main" && f.run.generation === 2);
    const runs = h.facts.items.flatMap((f) => (f.sessionId === sessionId && f.type === "app" && f.app === "main" ? [f.run] : []));
    expect(runs.map((r) => [r.generation, r.phase, r.trigger])).toEqual([
      [1, "running", "initial"],
      [1, "completed", "initial"],
      [2, "running", "manual"],
    ]);
    expect(h.facts.items.filter((f) => f.sessionId === sessionId).map((f) => f.type)[0]).toBe("running");
    await h.send({ type: "restart_app", sessionId, requestId: "r2", app: "nope", trigger: "manual" });
    expect(await h.fact(sessionId, "refused", (f) => f.requestId === "r2")).toMatchObject({ reason: "unknown app nope" });
    expect(h.facts.items.some((f) => f.sessionId === sessionId && f.type === "exited")).toBe(false);
  });

  it("a warm-suspended session suspended cold is checkpointed as it stands (stopped) and its sandbox removed", async () => {
    const sessionId = nextId();
    const term = collectTerm(nats.nc, sessionId, "main");
    await h.start(sessionId, { cmd: [process.execPath, "-e", "require('fs').writeFileSync('kept.txt', 'frozen-state'); console.log('pid=' + process.pid); setInterval(() => {}, 1000);"] });
    await term.waitFor(() => /pid=\d+/.test(term.text()));
    const pid = hostPidOf(h.t, sessionId, Number(/pid=(\d+)/.exec(term.text())?.[1]));
    await h.send({ type: "suspend", sessionId, requestId: "wc1", warm: true });
    await h.fact(sessionId, "suspended", (f) => f.warm);
    await h.send({ type: "suspend", sessionId, requestId: "wc2", warm: false });
    const cold = await h.fact(sessionId, "suspended", (f) => !f.warm);
    expect(cold).toMatchObject({ checkpoint: { ref: `${runnerObjectStore(ObjectStores.checkpoints, h.t.config.poolId, h.t.config.runnerId)}/ws1/${sessionId}/1-wc2` } });
    expect(h.facts.items.some((f) => f.sessionId === sessionId && f.type === "refused")).toBe(false);
    expect(existsSync(join(h.t.config.dataDir, "sessions", sessionId))).toBe(false);
    await eventually(() => !stillRuns(pid), "the stopped app was ended");
    // The checkpoint holds the workspace as the stopped app left it.
    if (cold.type !== "suspended" || !cold.checkpoint || !cold.sealKey) throw new Error("expected a sealed checkpoint");
    const restored = collectTerm(nats.nc, sessionId, "main");
    await h.start(sessionId, { cmd: ["sh", "-c", "cat kept.txt; exit 0"] }, { placementGeneration: 2, trigger: "resume", restore: cold.checkpoint, restoreKey: cold.sealKey });
    await h.fact(sessionId, "exited", (f) => f.placementGeneration === 2);
    expect(restored.text()).toContain("frozen-state");
  });

  it("a resumed placement numbers app generations on from the start's appGenerations, with trigger resume", async () => {
    const sessionId = nextId();
    await h.start(sessionId, { apps: [{ name: "web", cmd: ["sleep", "600"] }, { name: "side", cmd: ["sleep", "600"] }] }, { placementGeneration: 2, trigger: "resume", appGenerations: { web: 4 } });
    const web = await h.fact(sessionId, "app", (f) => f.app === "web");
    const side = await h.fact(sessionId, "app", (f) => f.app === "side");
    expect(web.run).toMatchObject({ generation: 5, phase: "running", trigger: "resume" });
    expect(side.run).toMatchObject({ generation: 1, trigger: "resume" });
    await h.send({ type: "restart_app", sessionId, requestId: "rg1", app: "web", trigger: "manual", placementGeneration: 2 });
    // The generation a restart started names the request (it settles the scheduler's pending restart).
    expect(await h.fact(sessionId, "app", (f) => f.app === "web" && f.run.generation === 6)).toMatchObject({ requestId: "rg1", run: { trigger: "manual", phase: "running" } });
  });

  it("an app killed by a signal it did not get from the runner is failed with the signal; one the runner stops is completed", async () => {
    const sessionId = nextId();
    const term = collectTerm(nats.nc, sessionId, "main");
    await h.start(sessionId, { apps: [{ name: "main", cmd: [process.execPath, "-e", "console.log('pid=' + process.pid); setInterval(() => {}, 1000);"] }, { name: "side", cmd: ["sleep", "600"] }] });
    await term.waitFor(() => /pid=\d+/.test(term.text()));
    process.kill(hostPidOf(h.t, sessionId, Number(/pid=(\d+)/.exec(term.text())?.[1]), "setInterval"), "SIGKILL");
    const ended = await h.fact(sessionId, "app", (f) => f.app === "main" && f.run.phase !== "running");
    expect(ended.run).toMatchObject({ generation: 1, phase: "failed", exitCode: null, signal: "SIGKILL", reason: "killed by SIGKILL" });
    await h.send({ type: "restart_app", sessionId, requestId: "k1", app: "side", trigger: "manual" });
    const stopped = await h.fact(sessionId, "app", (f) => f.app === "side" && f.run.phase !== "running");
    expect(stopped.run).toMatchObject({ generation: 1, phase: "completed" });
  });

  it("ignores commands for another placement or runner generation, refuses unknown sessions", async () => {
    const sessionId = nextId();
    await h.start(sessionId, { cmd: ["sleep", "600"] });
    await h.fact(sessionId, "running");
    const staleBefore = await counterValue(h.t.metrics.staleDispatch);
    await h.send({ type: "suspend", sessionId, requestId: "s1", warm: true, placementGeneration: 2 });
    await h.send({ type: "checkpoint", sessionId, requestId: "s2", runnerGeneration: h.t.agent.generation + 1 });
    await h.send({ type: "checkpoint", sessionId, requestId: "s3" });
    await h.fact(sessionId, "checkpointed", (f) => f.requestId === "s3");
    expect(h.facts.items.filter((f) => f.sessionId === sessionId).map((f) => f.type)).toEqual(["running", "app", "checkpointed"]);
    expect((await counterValue(h.t.metrics.staleDispatch)) - staleBefore).toBe(2);
    await h.send({ type: "suspend", sessionId: "unknown1", requestId: "u1", warm: false });
    expect(await h.fact("unknown1", "refused")).toMatchObject({ requestId: "u1", reason: "session is not held by this runner" });
  });

  it("destroy leaves nothing running in the sandbox, not even a process that left its app's group", async () => {
    const sessionId = nextId();
    const term = collectTerm(nats.nc, sessionId, "main");
    // setsid: a new session and process group, out of reach of the group's signals.
    // The escaped process prints its own pid once setsid() is done (setsid execs it), so the check below cannot run first.
    await h.start(sessionId, { cmd: ["sh", "-c", "setsid sh -c 'echo escaped=$$; exec sleep 300' & exec sleep 600"] });
    await term.waitFor(() => /escaped=\d+/.test(term.text()));
    const escaped = hostPidOf(h.t, sessionId, Number(/escaped=(\d+)/.exec(term.text())?.[1]));
    // It leads a group of its own.
    expect(Number(procStat(escaped)[2])).toBe(escaped);
    await h.send({ type: "destroy", sessionId });
    await h.fact(sessionId, "destroyed");
    expect(stillRuns(escaped)).toBe(false);
  });

  it("a runner set to compress nothing writes a sealed plain tar; a runner that gzips restores it", async () => {
    const plain = await harness({ checkpointCompression: "none", checkpointFormat: "tar" });
    const sessionId = nextId();
    const term = collectTerm(nats.nc, sessionId, "main");
    await plain.start(sessionId, { cmd: ["sh", "-c", "echo kept > kept.txt; echo ready; exec sleep 600"] });
    await term.waitFor(() => term.text().includes("ready"));
    await plain.send({ type: "checkpoint", sessionId, requestId: "p1" });
    const snap = await plain.fact(sessionId, "checkpointed", (f) => f.requestId === "p1");
    if (snap.type !== "checkpointed") throw new Error("unreachable");
    expect(snap.checkpoint.format).toBe(SEALED_TAR_FORMAT);
    const [store = "", ...path] = snap.checkpoint.ref.split("/");
    const raw = await (await new Objm(nats.nc).open(store)).getBlob(path.join("/"));
    expect(Buffer.from(raw ?? []).includes("kept\n")).toBe(false);
    // h gzips its own checkpoints; it reads this one by its format (into a session of its own: the log fence is per session).
    const other = nextId();
    const restored = collectTerm(nats.nc, other, "main");
    await h.start(other, { cmd: ["sh", "-c", "cat kept.txt; exit 0"] }, { trigger: "resume", restore: snap.checkpoint, restoreKey: snap.sealKey });
    await h.fact(other, "exited");
    expect(restored.text()).toContain("kept");
    // An unknown format is refused before anything is read.
    const third = nextId();
    await h.start(third, { cmd: ["true"] }, { trigger: "resume", restore: { ...snap.checkpoint, format: "tar+zstd" }, restoreKey: snap.sealKey });
    expect(await h.fact(third, "failed")).toMatchObject({ reason: "restore failed: unsupported checkpoint format tar+zstd" });
  });

  it("a start restoring a malicious checkpoint fails without writing outside the workspace", async () => {
    const sessionId = nextId();
    const os = await new Objm(nats.nc).open(ObjectStores.checkpoints);
    // Sealed with a key the start carries: the runner opens it, and extraction refuses the entry.
    const ref = `checkpoints/ws1/${sessionId}/evil`;
    const key = newSealKey();
    await os.putBlob({ name: `ws1/${sessionId}/evil` }, await sealBytes(key, ref, maliciousTar(tarEntry("../../escaped.txt", { body: "x" }))));
    await h.start(sessionId, { cmd: ["true"] }, { trigger: "resume", restore: { ref, format: SEALED_ARCHIVE_FORMAT, capabilities: ["portable"] }, restoreKey: key.toString("base64") });
    expect(await h.fact(sessionId, "failed")).toMatchObject({ reason: "restore failed: archive refused: path contains .." });
    expect(existsSync(join(h.t.config.dataDir, "escaped.txt"))).toBe(false);
  });
});

describe("watch mode", () => {
  /** Real time: the reload window and the settle window are measured by the runner's clock. */
  const watchHarness = (overrides: Partial<AgentConfig>) => harness({ watchSettleMs: 300, ...overrides }, undefined, { now: Date.now });
  const runtimeOf = (h: Harness, sessionId: string) => {
    const runtime = h.t.agent.sessions.get(sessionId);
    if (!runtime) throw new Error(`no session ${sessionId}`);
    return runtime;
  };
  const generations = (h: Harness, sessionId: string) =>
    new Set(h.facts.items.flatMap((f) => (f.sessionId === sessionId && f.type === "app" ? [f.run.generation] : []))).size;
  const ignored = async (h: Harness, reason: string) => (await h.t.metrics.watchChangesIgnored.get()).values.find((v) => v.labels.reason === reason)?.value ?? 0;

  it("restarts every app on a workspace change with trigger watch; a reload over the limit waits for the window, never dropped", async () => {
    const h = await watchHarness({ watchMaxReloads: 1, watchWindowMs: 5_000 });
    const sessionId = nextId();
    await h.start(sessionId, { cmd: ["sh", "-c", "echo tick; exit 0"] }, { mode: "watch" });
    const workspace = join(h.t.config.dataDir, "sessions", sessionId, "workspace");
    // Completing does not end a watch session.
    await h.fact(sessionId, "app", (f) => f.run.phase === "completed");
    await eventually(() => runtimeOf(h, sessionId).reloadQuiet, "boot settled");
    writeFileSync(join(workspace, "a.txt"), "1");
    expect((await h.fact(sessionId, "app", (f) => f.run.generation === 2)).run).toMatchObject({ phase: "running", trigger: "watch" });
    writeFileSync(join(workspace, "a.txt"), "2");
    await eventually(async () => (await counterValue(h.t.metrics.watchReloadsDeferred)) >= 1, "reload deferred");
    // The deferred reload runs at the end of the window, with trigger watch.
    expect((await h.fact(sessionId, "app", (f) => f.run.generation === 3)).run.trigger).toBe("watch");
    expect(await counterValue(h.t.metrics.watchReloads)).toBe(2);
    expect(h.facts.items.some((f) => f.sessionId === sessionId && f.type === "exited")).toBe(false);
  });

  it("an app writing into its own workspace as it starts does not reload itself; a user's change still does", async () => {
    const h = await watchHarness({ watchSettleMs: 1_500 });
    const sessionId = nextId();
    await h.start(sessionId, { cmd: ["sh", "-c", "date +%s%N > out.txt; echo up; exec sleep 600"] }, { mode: "watch" });
    const workspace = join(h.t.config.dataDir, "sessions", sessionId, "workspace");
    await h.fact(sessionId, "app", (f) => f.run.generation === 1);
    await eventually(async () => (await ignored(h, "own_write")) >= 1, "the boot's own write seen");
    await eventually(() => runtimeOf(h, sessionId).reloadQuiet, "boot settled");
    writeFileSync(join(workspace, "user.txt"), "1");
    expect((await h.fact(sessionId, "app", (f) => f.run.generation === 2 && f.run.phase === "running")).run.trigger).toBe("watch");
    // The new generation writes out.txt again as it starts: remembered as its own, it reloads nothing.
    await eventually(async () => (await ignored(h, "own_write")) >= 2, "the reload's own write seen");
    await eventually(() => runtimeOf(h, sessionId).reloadQuiet, "reload settled");
    expect(generations(h, sessionId)).toBe(2);
    expect(await counterValue(h.t.metrics.watchReloads)).toBe(1);
  });

  it("a change while warm-suspended reloads the apps on resume", async () => {
    const h = await watchHarness({});
    const sessionId = nextId();
    await h.start(sessionId, { cmd: ["sh", "-c", "echo up; exec sleep 600"] }, { mode: "watch" });
    const workspace = join(h.t.config.dataDir, "sessions", sessionId, "workspace");
    await h.fact(sessionId, "app", (f) => f.run.generation === 1);
    await eventually(() => runtimeOf(h, sessionId).reloadQuiet, "boot settled");
    await h.send({ type: "suspend", sessionId, requestId: "ws1", warm: true });
    await h.fact(sessionId, "suspended");
    writeFileSync(join(workspace, "user.txt"), "1");
    // The reload fell due while frozen; it starts nothing until the resume.
    await eventually(async () => (await counterValue(h.t.metrics.watchReloads)) >= 1 && runtimeOf(h, sessionId).reloadQuiet, "reload due while frozen");
    expect(generations(h, sessionId)).toBe(1);
    await h.send({ type: "resume", sessionId, requestId: "wr1" });
    expect((await h.fact(sessionId, "app", (f) => f.run.generation === 2 && f.run.phase === "running")).run.trigger).toBe("watch");
  });

  it("changes under .git, node_modules and the patterns of .paddockignore reload nothing", async () => {
    const h = await watchHarness({});
    const sessionId = nextId();
    await h.start(sessionId, { cmd: ["sh", "-c", "echo up; exec sleep 600"] }, { mode: "watch" });
    const workspace = join(h.t.config.dataDir, "sessions", sessionId, "workspace");
    await h.fact(sessionId, "app", (f) => f.run.generation === 1);
    await eventually(() => runtimeOf(h, sessionId).reloadQuiet, "boot settled");
    writeFileSync(join(workspace, ".paddockignore"), "# the app's own output\nlogs/\n*.tmp\n");
    await eventually(async () => (await ignored(h, "ignore_rule")) >= 1, "ignore file seen");
    for (const dir of ["logs", ".git", "node_modules/p"]) mkdirSync(join(workspace, dir), { recursive: true });
    for (const file of ["logs/app.log", "x.tmp", ".git/HEAD", "node_modules/p/index.js"]) writeFileSync(join(workspace, file), "x");
    await eventually(async () => (await ignored(h, "ignore_rule")) >= 5, "ignored changes seen");
    await eventually(() => runtimeOf(h, sessionId).reloadQuiet, "nothing due");
    expect(await counterValue(h.t.metrics.watchReloads)).toBe(0);
    writeFileSync(join(workspace, "user.txt"), "1");
    expect((await h.fact(sessionId, "app", (f) => f.run.generation === 2 && f.run.phase === "running")).run.trigger).toBe("watch");
    await eventually(() => runtimeOf(h, sessionId).reloadQuiet, "reload settled");
    expect(generations(h, sessionId)).toBe(2);
    expect(await counterValue(h.t.metrics.watchReloads)).toBe(1);
  });
});

describe("activity report", () => {
  it("names, once per interval, the sessions whose apps wrote output, and no other", async () => {
    const h = await harness({ activityMs: 50 });
    const reports = new Collector<RunnerActivity>();
    const sub = nats.nc.subscribe(Subjects.activity(h.t.config.poolId, h.t.config.runnerId), {
      callback: (_err, msg) => {
        const decoded = decodeJson(RunnerActivity, msg.data);
        if (!decoded.ok) throw new Error(`malformed activity report: ${decoded.reason}`);
        reports.push(decoded.value);
      },
    });
    const silent = nextId();
    const chatty = nextId();
    await h.start(silent, { cmd: ["sleep", "600"] });
    await h.fact(silent, "running");
    await h.start(chatty, { cmd: ["sh", "-c", "while :; do echo x; sleep 0.1; done"] });
    const report = await reports.waitFor((r) => r.sessions.includes(chatty));
    expect(report).toMatchObject({ poolId: h.t.config.poolId, runnerId: h.t.config.runnerId });
    // A second report shows the marks were cleared and set again by new output.
    await reports.waitFor((r) => r !== report && r.sessions.includes(chatty));
    expect(reports.items.some((r) => r.sessions.includes(silent))).toBe(false);
    sub.unsubscribe();
    await h.send({ type: "destroy", sessionId: silent });
    await h.send({ type: "destroy", sessionId: chatty });
  });
});

describe("environment boot", () => {
  let h: Harness;
  let marks: string;
  const env = (extra: Partial<BootEnvironment> = {}): BootEnvironment => ({
    environmentId: "env1",
    setupHash: "h1",
    // umask 0: each session is a uid of its own, and the next one appends to the marks the first made.
    setup: `umask 0; echo s >> ${marks}/setup-count; echo built > built.txt`,
    init: `umask 0; echo i >> ${marks}/init-count`,
    secretRefs: ["API_KEY"],
    ...extra,
  });
  const lines = (file: string) => (existsSync(join(marks, file)) ? readFileSync(join(marks, file), "utf8").trim().split("\n").length : 0);
  beforeAll(async () => {
    // Setup and init leave their marks outside the workspace, in a dir the runner binds into every session
    // (PADDOCK_SANDBOX_SHARED_DIRS): sessions' uids are their own, so it is writable by all.
    marks = mkdtempSync(join(tmpdir(), "paddock-marks-"));
    chmodSync(marks, 0o1777);
    h = await harness({ sandbox: { ...TEST_SANDBOX, shared: [marks] } });
  });

  it("runs setup once and publishes its snapshot; a start with the snapshot skips setup; init runs on every boot", async () => {
    const first = nextId();
    const term1 = collectTerm(nats.nc, first, "main");
    await h.start(first, { cmd: ["sh", "-c", "cat built.txt; exit 0"] }, { environment: env() });
    const snap = await h.fact(first, "env_snapshot");
    expect(snap).toMatchObject({ environmentId: "env1", setupHash: "h1", checkpoint: { ref: `${runnerObjectStore(ObjectStores.envSnapshots, h.t.config.poolId, h.t.config.runnerId)}/ws1/env1/h1`, format: MANIFEST_FORMAT } });
    if (snap.type !== "env_snapshot") throw new Error("unreachable");
    await h.fact(first, "exited");
    expect(term1.text()).toContain("built");
    expect(h.facts.items.filter((f) => f.sessionId === first).map((f) => f.type).slice(0, 2)).toEqual(["env_snapshot", "running"]);

    const second = nextId();
    const term2 = collectTerm(nats.nc, second, "main");
    await h.start(second, { cmd: ["sh", "-c", "cat built.txt; exit 0"] }, { environment: env({ snapshot: snap.checkpoint, snapshotKey: snap.sealKey }) });
    await h.fact(second, "exited");
    expect(term2.text()).toContain("built");
    expect(h.facts.items.some((f) => f.sessionId === second && f.type === "env_snapshot")).toBe(false);
    expect(lines("setup-count")).toBe(1);
    expect(lines("init-count")).toBe(2);
  });

  it("states the setup it booted with on its running fact, and none for a restored workspace (it holds the setup it had)", async () => {
    const fresh = nextId();
    await h.start(fresh, { cmd: ["sleep", "600"] }, { environment: env({ setupHash: "h-fresh", setup: "true" }) });
    expect(await h.fact(fresh, "running")).toMatchObject({ setupHash: "h-fresh" });
    await h.send({ type: "suspend", sessionId: fresh, requestId: "sh1", warm: false });
    const cold = await h.fact(fresh, "suspended");
    if (cold.type !== "suspended" || !cold.checkpoint || !cold.sealKey) throw new Error("expected a sealed checkpoint");
    await h.start(fresh, { cmd: ["sleep", "600"] }, { placementGeneration: 2, trigger: "resume", restore: cold.checkpoint, restoreKey: cold.sealKey, environment: env({ setupHash: "h-edited" }) });
    const resumed = await h.fact(fresh, "running", (f) => f.placementGeneration === 2);
    expect(resumed).not.toHaveProperty("setupHash");
    await h.send({ type: "destroy", sessionId: fresh, placementGeneration: 2 });
  });

  it("reports failed when setup or init fails or setup times out", async () => {
    const a = nextId();
    await h.start(a, { cmd: ["true"] }, { environment: env({ setup: "exit 7" }) });
    expect(await h.fact(a, "failed")).toMatchObject({ reason: "setup failed (exit 7)" });
    expect(existsSync(join(h.t.config.dataDir, "sessions", a))).toBe(false);
    const b = nextId();
    await h.start(b, { cmd: ["true"] }, { environment: env({ setup: undefined, init: "exit 3" }) });
    expect(await h.fact(b, "failed")).toMatchObject({ reason: "init failed (exit 3)" });
    const c = nextId();
    await h.start(c, { cmd: ["true"] }, { environment: env({ setup: "exec sleep 600", setupTimeoutSec: 1 }) });
    expect(await h.fact(c, "failed")).toMatchObject({ reason: "setup timed out after 1s" });
    for (const s of [a, b, c]) expect(h.facts.items.some((f) => f.sessionId === s && f.type === "running")).toBe(false);
  });
});

describe("app environment and pipes", () => {
  it("hands the session token to apps and never logs it", async () => {
    const logged: Buffer[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        logged.push(Buffer.from(chunk));
        cb();
      },
    });
    const token = "tok_0123456789abcdef_secret";
    const sessionId = nextId();
    // The scheduler's side of the boot call: the token of this placement, only when asked for it.
    const asked: FleetRpcRequest[] = [];
    const answering = serveRpc(
      nats.nc,
      FleetRpc.sessionSecrets,
      (req) => {
        asked.push(req);
        return Promise.resolve({ secrets: [], ...(req.token === true && req.sessionId === sessionId ? { sessionToken: token } : {}) });
      },
      { log: silentLogger(), metrics: createBusMetrics(new Registry()), queue: `boot-${sessionId}` },
    );
    const runnerLog = createLogger({ service: "runner-agent", level: "trace", destination: sink });
    const runnerId = `boot-${sessionId}`;
    const h = await harness({ runnerId }, runnerLog, { secrets: new RpcSecretResolver(nats.nc, undefined, { poolId: "default", runnerId }) });
    const term = collectTerm(nats.nc, sessionId, "main");
    const cmd = 'printf %s "$PADDOCK_TOKEN" | sha256sum; echo "url=$PADDOCK_URL sid=$PADDOCK_SESSION_ID"';
    await h.start(sessionId, { cmd: ["sh", "-c", cmd] });
    await h.fact(sessionId, "exited");
    answering.unsubscribe();
    expect(asked).toMatchObject([{ runnerId, sessionId, token: true, names: [] }]);
    expect(term.text()).toContain(createHash("sha256").update(token).digest("hex"));
    // PADDOCK_URL is the runner's relay to the gateway, on the runner's end of the session's network (bwrap).
    expect(term.text()).toMatch(new RegExp(`url=http://10\\.\\d+\\.\\d+\\.\\d+:\\d+ sid=${sessionId}`));
    expect(term.text()).not.toContain(token);
    expect(Buffer.concat(logged).toString("utf8")).toContain(sessionId);
    expect(Buffer.concat(logged).toString("utf8")).not.toContain(token);
  });

  it("runs a tty:false app with pipes and tags each chunk with its stream", async () => {
    const h = await harness();
    const sessionId = nextId();
    const term = collectTerm(nats.nc, sessionId, "main");
    await h.start(sessionId, { apps: [{ name: "main", tty: false, cmd: ["sh", "-c", "echo out-line; echo err-line >&2; exit 5"] }] });
    expect(await h.fact(sessionId, "exited")).toMatchObject({ exitCode: 5 });
    await term.waitFor((m) => m.exitCode !== undefined);
    const text = (stream: string) => Buffer.concat(term.items.filter((m) => m.stream === stream).map((m) => m.body)).toString("utf8");
    expect(text("stdout")).toBe("out-line\n");
    expect(text("stderr")).toBe("err-line\n");
    expect(term.items.filter((m) => m.body.byteLength > 0).every((m) => m.stream !== undefined)).toBe(true);
  });
});
