/**
 * Fault injection with real processes and a real nats-server: a runner
 * SIGSTOPped past its lease while its session moves on, runners and
 * schedulers SIGKILLed mid-placement, and nats-server restarted under load.
 */
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { DispatchCommand, Headers, Subjects, type Session } from "@paddock/contracts";
import { FAST_LIVENESS_ENV, previewAppSpec, putPreviewApp, untilGone, startNatsServer, untilAnswers, startService, startStack, untilSession, type Stack } from "@paddock/testing";
import { api, sessionOf, Terminal } from "./helpers.ts";

/** Short leases and fast sweeps so faults play out in seconds. */
const FAST = FAST_LIVENESS_ENV;

let stack: Stack | undefined;
let nc: NatsConnection | undefined;
afterEach(async () => {
  await nc?.drain().catch(() => undefined);
  await stack?.stop();
  stack = undefined;
  nc = undefined;
});

async function up(runners: number, capacity = 8, env: typeof FAST = FAST): Promise<{ stack: Stack; nc: NatsConnection }> {
  stack = await startStack({ runners, runnerCapacity: capacity, env });
  nc = await connect({ servers: stack.nats.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  return { stack, nc };
}

async function createSession(s: Stack, body: Record<string, unknown>): Promise<Session> {
  const res = await api(s.url, s.token, "POST", "/v1/sessions", body);
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return sessionOf(res);
}

/** Resolves with the record once pred holds (a KV watch: every revision, no polling). */
function until(conn: NatsConnection, id: string, pred: (s: Session) => boolean): Promise<Session> {
  return untilSession(conn, id, pred);
}

/** Every TERM message of one app in order, with the generation that wrote it. */
async function termLog(conn: NatsConnection, sessionId: string): Promise<Array<{ seq: number; generation: number; text: string }>> {
  const consumer = await jetstream(conn).consumers.get("TERM", { filter_subjects: [Subjects.termOfApp(sessionId, "main")], deliver_policy: DeliverPolicy.All });
  const out: Array<{ seq: number; generation: number; text: string }> = [];
  const info = await consumer.info();
  let pending = info.num_pending;
  if (pending === 0) return out;
  for await (const m of await consumer.consume()) {
    out.push({ seq: m.seq, generation: Number(m.headers?.get(Headers.placementGeneration) ?? 0), text: Buffer.from(m.data).toString() });
    if (--pending === 0) break;
  }
  return out;
}

/** Every start command ever dispatched, to check no (session, generation) went to two runners. */
async function dispatchedStarts(conn: NatsConnection): Promise<DispatchCommand[]> {
  const consumer = await jetstream(conn).consumers.get("DISPATCH", { deliver_policy: DeliverPolicy.All });
  const info = await consumer.info();
  let pending = info.num_pending;
  const starts: DispatchCommand[] = [];
  if (pending === 0) return starts;
  for await (const m of await consumer.consume()) {
    const cmd = DispatchCommand.parse(m.json());
    if (cmd.type === "start") starts.push({ ...cmd, runnerId: m.subject.split(".").pop() } as DispatchCommand & { runnerId?: string });
    if (--pending === 0) break;
  }
  return starts;
}

function placedOnce(starts: DispatchCommand[]): void {
  const runnerOf = new Map<string, string>();
  for (const s of starts as Array<DispatchCommand & { runnerId?: string }>) {
    const key = `${s.sessionId}/${s.placementGeneration}`;
    const prior = runnerOf.get(key);
    if (prior !== undefined) expect(prior).toBe(s.runnerId);
    runnerOf.set(key, s.runnerId ?? "");
  }
}


describe("takeover", () => {
  it("SIGSTOP a runner past its lease: the session resumes elsewhere from its checkpoint; after SIGCONT nothing stale lands and the old copy is torn down", async () => {
    const { stack: s, nc: conn } = await up(1);
    const script = "if [ -f mark ]; then echo gen2-restored; else echo v1 > mark; echo gen1-ready; fi; i=0; while :; do echo tick$i; i=$((i+1)); sleep 0.05; done";
    const session = await createSession(s, { spec: { cmd: ["sh", "-c", script] } });
    const viewer = await Terminal.open(s.url, s.token, session.id, "since=all");
    await viewer.until((t) => t.output().includes("tick3"));
    const snap = await api(s.url, s.token, "POST", `/v1/sessions/${session.id}/snapshot`);
    expect(snap.status).toBe(200);
    const second = await s.addRunner({ runnerId: "runner-2" });
    const first = s.runners[0];
    if (!first) throw new Error("no first runner");
    first.process.kill("SIGSTOP");
    const moved = await until(conn, session.id, (x) => x.state === "running" && x.placementGeneration === 2);
    expect(moved.runnerId).toBe(String(second.ready.runnerId));
    await viewer.until((t) => t.output().includes("gen2-restored"));
    first.process.kill("SIGCONT");
    // The old runner learns it was fenced, re-registers, and destroys its copy.
    await untilGone(join(s.dataDir, "runner-1", "sessions", session.id));
    await viewer.until((t) => (t.output().match(/tick\d+/g) ?? []).length > 0 && t.output().lastIndexOf("gen2-restored") < t.output().length - 40);
    // Stop taking frames before reading the log, so every cursor the viewer saw is in it.
    viewer.ws.close();
    await viewer.closed;

    const log = await termLog(conn, session.id);
    const firstGen2 = log.findIndex((m) => m.generation === 2);
    expect(firstGen2).toBeGreaterThan(0);
    expect(log.slice(firstGen2).every((m) => m.generation === 2)).toBe(true);
    // Every byte the viewer got after the takeover came from generation 2.
    const genAt = new Map(log.map((m) => [m.seq, m.generation]));
    const firstGen2Seq = log[firstGen2]?.seq ?? 0;
    for (const f of viewer.frames) if (f.kind === "output" && f.cursor >= firstGen2Seq) expect(genAt.get(f.cursor)).toBe(2);
    const record = sessionOf(await api(s.url, s.token, "GET", `/v1/sessions/${session.id}`));
    expect(record).toMatchObject({ state: "running", placementGeneration: 2, runnerId: "runner-2" });
  });
});

describe("crashes mid-placement", () => {
  it("SIGKILL a runner while sessions are being placed: none lost, none placed twice in one generation, none stuck", async () => {
    const { stack: s, nc: conn } = await up(2, 4);
    const sessions = await Promise.all(Array.from({ length: 6 }, () => createSession(s, { spec: { cmd: ["sleep", "600"] } })));
    await s.runners[0]?.kill();
    // Settled: running on the surviving runner, or ended with a reason.
    const settled = await Promise.all(
      sessions.map((x) => until(conn, x.id, (r) => (r.state === "running" && r.runnerId === "runner-2") || r.state === "dead" || r.state === "failed")),
    );
    for (const r of settled) {
      if (r.state !== "running") expect(r.error).toMatch(/runner_lost|did not start/);
      else expect(r.runnerId).toBe("runner-2");
    }
    placedOnce(await dispatchedStarts(conn));
  });

  it("SIGKILL the scheduler while sessions are being placed: after a restart every session runs, none placed twice", async () => {
    const { stack: s, nc: conn } = await up(1, 16);
    const creates = Array.from({ length: 8 }, () => api(s.url, s.token, "POST", "/v1/sessions", { spec: { cmd: ["sleep", "600"] } }));
    await s.scheduler.kill();
    const answers = await Promise.all(creates);
    // A request the dead scheduler did not answer is refused (503); it may or may not have been committed.
    for (const a of answers) expect([201, 503]).toContain(a.status);
    const restarted = await startService("scheduler", { ...s.commonEnv, ...FAST.scheduler, PADDOCK_SESSION_TOKEN_SECRET: "restarted-secret-0123456789" });
    try {
      await createSession(s, { spec: { cmd: ["sleep", "600"] } });
      // Every session that exists — answered or not — is placed exactly once and runs.
      const all = (await api(s.url, s.token, "GET", "/v1/sessions?limit=500&includeTerminal=true")).body as { sessions: Session[] };
      for (const a of answers.filter((x) => x.status === 201)) expect(all.sessions.map((x) => x.id)).toContain(sessionOf(a).id);
      for (const x of all.sessions) expect((await until(conn, x.id, (r) => r.state === "running")).placementGeneration).toBe(1);
      placedOnce(await dispatchedStarts(conn));
      const page = await api(s.url, s.token, "GET", "/v1/runners");
      const runner = (page.body as { runners: Array<{ capacityUsed: number }> }).runners[0];
      const live = (await api(s.url, s.token, "GET", "/v1/sessions?limit=500")).body as { sessions: Session[] };
      expect(runner?.capacityUsed).toBe(live.sessions.filter((x) => x.state === "running" || x.state === "creating").length);
    } finally {
      await restarted.stop();
    }
  });
});

describe("broker restart", () => {
  it("every service reconnects after nats-server restarts under load and carries on without being restarted", async () => {
    // The default lease (10 s, 20 s grace), not FAST's 2 s: this is about reconnecting, and a
    // broker restart on a loaded machine may outlast a 3 s lease window (the runner is then
    // rightly lost, which is the crash tests' subject, not this one's).
    const lease = { PADDOCK_RUNNER_LEASE_TTL_MS: "10000", PADDOCK_RUNNER_LOST_GRACE_MS: "20000" };
    const { stack: s, nc: conn } = await up(1, 8, {
      scheduler: { ...FAST.scheduler, ...lease },
      "runner-agent": { PADDOCK_RUNNER_LEASE_TTL_MS: lease.PADDOCK_RUNNER_LEASE_TTL_MS, PADDOCK_RUNNER_LEASE_RENEW_MS: "2000" },
    });
    const chatty = await createSession(s, { spec: { cmd: ["sh", "-c", "i=0; while :; do echo line$i; i=$((i+1)); sleep 0.02; done"] } });
    const viewer = await Terminal.open(s.url, s.token, chatty.id, "since=all");
    await viewer.until((t) => t.output().includes("line5"));
    const { port, storeDir } = s.nats;
    await s.nats.kill();
    const restarted = await startNatsServer({ port, storeDir });
    try {
      // Each service says when its connection is back (the bus logs status changes).
      const services = [s.scheduler, s.recorder, s.gateway, ...s.runners];
      const mark = services.map((svc) => svc.logs.length);
      await Promise.all(services.map((svc, i) => svc.waitForLog((l) => l.msg === "nats reconnect" && svc.logs.indexOf(l) >= (mark[i] ?? 0))));
      // The same processes: nothing was restarted but the broker.
      const after = await createSession(s, { spec: { cmd: ["sh", "-c", "echo after-restart; exit 3"] } });
      const done = await until(conn, after.id, (r) => r.state === "dead");
      expect(done.childExitCode, `record: ${JSON.stringify({ error: done.error, apps: done.apps })}`).toBe(3);
      // Its DISPATCH consumer is memory-backed: the restart lost it, and the runner made it again.
      for (const runner of s.runners) expect(runner.logs.some((l) => l.msg === "consumer lost by the server; creating it again")).toBe(true);
      const term = await Terminal.open(s.url, s.token, after.id, "since=all");
      await term.closed;
      expect(term.output()).toContain("after-restart");
      // The chatty session kept writing through the restart, and its log is still one ordered stream.
      const log = await termLog(conn, chatty.id);
      const numbers = log.flatMap((m) => [...m.text.matchAll(/line(\d+)/g)].map((x) => Number(x[1])));
      for (let i = 1; i < numbers.length; i++) expect(numbers[i]).toBeGreaterThan(numbers[i - 1] ?? -1);
      for (const svc of [s.scheduler, s.recorder, s.gateway, ...s.runners]) expect(svc.process.exitCode).toBeNull();
    } finally {
      viewer.ws.close();
      // Services first (they drain into the restarted broker), then the broker.
      await s.stop();
      stack = undefined;
      await restarted.stop();
    }
  });
});

describe("a runner dies under a preview", () => {
  it("the client mid-download gets an error, never a hang; once the session runs on the other runner its port answers again", async () => {
    const { stack: s, nc: conn } = await up(2, 4);
    const session = await createSession(s, { spec: { apps: [previewAppSpec("web", [{ port: 8000, public: true }])] } });
    const running = await until(conn, session.id, (r) => r.state === "running");
    await putPreviewApp(s.url, s.token, session.id);
    const url = `${s.url}/v1/sessions/${session.id}/ports/8000`;
    await untilAnswers(`${url}/`);
    // A checkpoint to resume from, elsewhere.
    expect((await api(s.url, s.token, "POST", `/v1/sessions/${session.id}/snapshot`, {})).status).toBeLessThan(300);
    const download = await fetch(`${url}/big?mb=512`);
    expect(download.status).toBe(200);
    const reader = (download.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    // The runner that holds the session dies; the client is told (an error), it does not wait forever.
    await s.runners[Number((running.runnerId ?? "").split("-")[1]) - 1]?.kill();
    let ended: "error" | "done" = "done";
    try {
      for (;;) if ((await reader.read()).done) break;
    } catch {
      ended = "error";
    }
    expect(ended).toBe("error");
    const moved = await until(conn, session.id, (r) => r.state === "running" && r.runnerId !== running.runnerId);
    expect(moved.placementGeneration).toBeGreaterThan(running.placementGeneration);
    expect(await untilAnswers(`${url}/`)).toBe("hello from port 8000\n");
    // Long by nature: two silent ping periods (10 s), the lost runner's lease, a restore and an app's start elsewhere.
  }, 180_000);
});
