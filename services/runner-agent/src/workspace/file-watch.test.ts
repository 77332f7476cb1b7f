import { appendFileSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callRpc, provision } from "@paddock/bus";
import { FileWatchBatch, MAX_WATCHES_PER_SESSION, PaddockError, watchEventsSubject, workspaceRpcs, type DispatchCommand, type FileChange } from "@paddock/contracts";
import { silentLogger } from "@paddock/logging";
import { useNatsServer } from "@paddock/testing/vitest";
import { createRunnerMetrics } from "../metrics.ts";
import { serveFileWatch } from "./file-watch.ts";
import { translate } from "./workspace-ops.ts";
import { collectFacts, dispatchTo, eventually, fakeScheduler, testAgent, type TestAgent } from "../testing/test-support.ts";

const nats = useNatsServer();
const agents: TestAgent[] = [];
const WS = "ws1";
/** The runner's clock: leases are judged on it, so a lapse is a step of this, not a wait. */
let clock = 1_700_000_000_000;

beforeAll(async () => {
  await provision(nats.nc, { replicas: 1 });
});
afterAll(async () => {
  for (const t of agents) await t.agent.stop();
});

let n = 0;

async function session() {
  const scheduler = fakeScheduler(nats.nc, 0);
  const t = testAgent(nats.nc, {}, undefined, { now: () => clock });
  agents.push(t);
  const facts = collectFacts(nats.nc, t.config.poolId, t.config.runnerId);
  await t.agent.start();
  scheduler.sub.unsubscribe();
  const sessionId = `fw${++n}`;
  const cmd = { type: "start", sessionId, workspaceId: WS, runnerGeneration: t.agent.generation, placementGeneration: 1, spec: { cmd: ["sleep", "1000"] }, mode: "run", trigger: "initial" };
  await dispatchTo(nats.nc, t, cmd as DispatchCommand);
  await facts.waitFor((f) => f.sessionId === sessionId && f.type === "running");
  return {
    t,
    workspace: join(t.config.dataDir, "sessions", sessionId, "workspace"),
    rpcs: workspaceRpcs(t.config.poolId, t.config.runnerId),
    target: { sessionId, workspaceId: WS, placementGeneration: 1 },
  };
}
type Held = Awaited<ReturnType<typeof session>>;

/** Starts a watch and collects what it publishes. */
async function watch(h: Held, path: string) {
  const watchId = `w${++n}`;
  const changes: FileChange[] = [];
  const batches: FileWatchBatch[] = [];
  const sub = nats.nc.subscribe(watchEventsSubject(h.t.config.poolId, h.t.config.runnerId, watchId), {
    callback: (_err, m) => {
      const b = FileWatchBatch.parse(m.json());
      batches.push(b);
      changes.push(...b.changes);
    },
  });
  await nats.nc.flush();
  await callRpc(nats.nc, h.rpcs.watch, { ...h.target, watchId, path, renew: false, leaseMs: 10_000 }, { timeoutMs: 10_000 });
  const seen = (path: string, kind: FileChange["kind"]) => eventually(() => changes.some((c) => c.path === path && c.kind === kind), () => `${kind} ${path} in ${JSON.stringify(changes)}`);
  const renew = () => callRpc(nats.nc, h.rpcs.watch, { ...h.target, watchId, path, renew: true, leaseMs: 10_000 }, { timeoutMs: 10_000 });
  return { watchId, changes, batches, seen, renew, stop: () => sub.unsubscribe() };
}

async function errorOf(p: Promise<unknown>): Promise<PaddockError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof PaddockError)) throw new Error(`expected a PaddockError, got ${String(err)}`);
  return err;
}

describe("files watch on the runner", () => {
  it("reports creates, modifications and deletes with workspace-relative paths, new directories included", async () => {
    const h = await session();
    const w = await watch(h, "");
    writeFileSync(join(h.workspace, "a.txt"), "1");
    await w.seen("a.txt", "create");
    appendFileSync(join(h.workspace, "a.txt"), "2");
    await w.seen("a.txt", "modify");
    mkdirSync(join(h.workspace, "sub", "deeper"), { recursive: true });
    await w.seen("sub", "create");
    writeFileSync(join(h.workspace, "sub", "deeper", "b.txt"), "b");
    await w.seen("sub/deeper/b.txt", "create");
    rmSync(join(h.workspace, "a.txt"));
    await w.seen("a.txt", "delete");
    w.stop();
  });

  it("never follows a symlink out of the workspace, and filters to the watched path", async () => {
    const h = await session();
    const outside = mkdtempSync(join(tmpdir(), "paddock-outside-"));
    mkdirSync(join(h.workspace, "src"));
    const all = await watch(h, "");
    const src = await watch(h, "src");
    symlinkSync(outside, join(h.workspace, "out"));
    await all.seen("out", "create");
    writeFileSync(join(outside, "secret"), "x");
    writeFileSync(join(h.workspace, "src", "index.ts"), "x");
    writeFileSync(join(h.workspace, "top.txt"), "x");
    await all.seen("top.txt", "create");
    await src.seen("src/index.ts", "create");
    expect(all.changes.filter((c) => c.path.startsWith("out/"))).toEqual([]);
    expect(src.changes.every((c) => c.path.startsWith("src/"))).toBe(true);
    // A single file: only its own changes.
    const one = await watch(h, "top.txt");
    writeFileSync(join(h.workspace, "other.txt"), "x");
    appendFileSync(join(h.workspace, "top.txt"), "y");
    await one.seen("top.txt", "modify");
    await all.seen("other.txt", "create");
    expect(one.changes.map((c) => c.path)).toEqual(["top.txt"]);
    for (const w of [all, src, one]) w.stop();
  });

  it("refuses .., absolute and symlinked paths, and a missing one", async () => {
    const h = await session();
    symlinkSync("/etc", join(h.workspace, "etc"));
    const ask = (path: string) => callRpc(nats.nc, h.rpcs.watch, { ...h.target, watchId: `w${++n}`, path, renew: false, leaseMs: 10_000 }, { timeoutMs: 10_000 });
    expect((await errorOf(ask("../x"))).code).toBe("invalid");
    expect((await errorOf(ask("/etc"))).code).toBe("invalid");
    expect((await errorOf(ask("etc"))).code).toBe("invalid");
    expect((await errorOf(ask("etc/passwd"))).code).toBe("invalid");
    expect((await errorOf(ask("missing"))).code).toBe("not_found");
    // Another placement generation is not this session's watch.
    expect((await errorOf(callRpc(nats.nc, h.rpcs.watch, { ...h.target, placementGeneration: 2, watchId: `w${++n}`, path: "", renew: false, leaseMs: 10_000 }, { timeoutMs: 10_000 }))).code).toBe("conflict");
  });

  it("holds at most MAX_WATCHES_PER_SESSION watches per session", async () => {
    const h = await session();
    const open = [];
    for (let i = 0; i < MAX_WATCHES_PER_SESSION; i++) open.push(await watch(h, ""));
    const err = await errorOf(callRpc(nats.nc, h.rpcs.watch, { ...h.target, watchId: `w${++n}`, path: "", renew: false, leaseMs: 10_000 }, { timeoutMs: 10_000 }));
    expect(err.code).toBe("conflict");
    for (const w of open) {
      await callRpc(nats.nc, h.rpcs.unwatch, { ...h.target, watchId: w.watchId }, { timeoutMs: 10_000 });
      w.stop();
    }
    (await watch(h, "")).stop();
  });

  it("stops a watch whose lease lapsed; a renewed one lives on", async () => {
    const h = await session();
    const lapsing = await watch(h, "");
    const renewed = await watch(h, "");
    clock += 6_000;
    await renewed.renew();
    clock += 6_000;
    // Past the first lease (10 s), within the renewed one: the next sweep stops only the first.
    await eventually(() => lapsing.batches.some((b) => b.ended), "the lapsed watch ended");
    expect((await errorOf(lapsing.renew())).code).toBe("not_found");
    expect(renewed.batches.some((b) => b.ended)).toBe(false);
    await renewed.renew();
    writeFileSync(join(h.workspace, "after.txt"), "x");
    await renewed.seen("after.txt", "create");
    expect(lapsing.changes).toEqual([]);
    lapsing.stop();
    renewed.stop();
  });

  it("ends the watch when the watched directory goes away", async () => {
    const h = await session();
    mkdirSync(join(h.workspace, "gone"));
    const w = await watch(h, "gone");
    rmSync(join(h.workspace, "gone"), { recursive: true });
    await eventually(() => w.batches.some((b) => b.ended), "an ended batch");
    w.stop();
  });
});

describe("files watch bounds (the watch service on a plain directory)", () => {
  /** The watch service over dir as the one held session's workspace, on a clock the test steps. */
  function service(dir: string, limits: { maxPending?: number; maxDirs?: number }) {
    const poolId = "default";
    const runnerId = `bounds${++n}`;
    let now = 0;
    const watches = serveFileWatch({
      nc: nats.nc,
      poolId,
      runnerId,
      rpcs: workspaceRpcs(poolId, runnerId),
      held: () => ({ workspaceTask: (fn) => fn(dir) }),
      now: () => now,
      // The sweep is driven by the test (sweep()), never by the interval.
      limits: { ...limits, sweepMs: 3_600_000 },
      serve: { queue: `workspace-${runnerId}`, metrics: createRunnerMetrics(), log: silentLogger() },
      log: silentLogger(),
      translate,
    });
    const h = { t: { config: { poolId, runnerId } }, rpcs: workspaceRpcs(poolId, runnerId), target: { sessionId: "s1", workspaceId: WS, placementGeneration: 1 } };
    return { watches, h: h as unknown as Held, step: (ms: number) => (now += ms) };
  }

  it("past the pending bound, drops changes and says overflow in the batch instead", async () => {
    const dir = mkdtempSync(join(tmpdir(), "paddock-watch-"));
    const { watches, h } = service(dir, { maxPending: 3 });
    const w = await watch(h, "");
    for (let i = 0; i < 20; i++) writeFileSync(join(dir, `f${i}`), "x");
    await eventually(() => w.batches.some((b) => b.overflow), "an overflow batch");
    expect(w.batches.find((b) => b.overflow)?.changes.length).toBeLessThanOrEqual(3);
    // The next window starts afresh.
    writeFileSync(join(dir, "later"), "x");
    await w.seen("later", "create");
    w.stop();
    watches.stop();
  });

  it("past the directory bound, says overflow rather than watch more", async () => {
    const dir = mkdtempSync(join(tmpdir(), "paddock-watch-"));
    mkdirSync(join(dir, "a", "b", "c"), { recursive: true });
    const { watches, h } = service(dir, { maxDirs: 2 });
    const w = await watch(h, "");
    await eventually(() => w.batches.some((b) => b.overflow), "an overflow batch");
    w.stop();
    watches.stop();
  });

  it("a watched directory swapped for a link is not followed: its old watch is dropped, the link is reported as a name", async () => {
    const dir = mkdtempSync(join(tmpdir(), "paddock-watch-"));
    const outside = mkdtempSync(join(tmpdir(), "paddock-outside-"));
    mkdirSync(join(dir, "d"));
    const { watches, h } = service(dir, {});
    const w = await watch(h, "");
    writeFileSync(join(dir, "d", "before"), "x");
    await w.seen("d/before", "create");
    renameSync(join(dir, "d"), join(dir, "moved"));
    symlinkSync(outside, join(dir, "d"));
    await w.seen("d", "create");
    writeFileSync(join(outside, "secret"), "x");
    writeFileSync(join(dir, "moved", "after"), "x");
    writeFileSync(join(dir, "marker"), "x");
    await w.seen("marker", "create");
    expect(w.changes.filter((c) => c.path === "d/secret" || c.path.endsWith("/secret"))).toEqual([]);
    // The moved directory is watched afresh under its new name (its old watch, under "d", was dropped).
    await w.seen("moved/after", "create");
    expect(w.changes.some((c) => c.path === "d/after")).toBe(false);
    w.stop();
    watches.stop();
  });

  it("a lease lapses on the injected clock alone", async () => {
    const dir = mkdtempSync(join(tmpdir(), "paddock-watch-"));
    const { watches, h, step } = service(dir, {});
    const w = await watch(h, "");
    step(9_999);
    watches.sweep();
    expect(watches.count).toBe(1);
    step(1);
    watches.sweep();
    expect(watches.count).toBe(0);
    await eventually(() => w.batches.some((b) => b.ended), "an ended batch");
    expect((await errorOf(w.renew())).code).toBe("not_found");
    w.stop();
    watches.stop();
  });
});
