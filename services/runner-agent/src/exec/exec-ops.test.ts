/**
 * The runner's exec requests on a real agent (sessions on bwrap): a reader
 * that goes silent takes its command with it, processes end with their
 * sandbox (their exits written), an exec is the session's activity, requests for another placement or an
 * unknown process are refused, and credit for a process nobody runs changes
 * nothing.
 */
import { describe, expect, it } from "vitest";
import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import { callRpc } from "@paddock/bus";
import { ExecCreditReply, execCreditSubject, ExecExit, execRpcs, Headers, PaddockError, RunnerActivity, Streams, Subjects, type DispatchCommand, type ExecStartRequest } from "@paddock/contracts";
import type { AgentConfig } from "../agent-types.ts";
import { agentTestServer, collectFacts, Collector, dispatchTo, fakeScheduler, testAgent } from "../testing/test-support.ts";

const env = agentTestServer();
let n = 0;
const WS = "ws1";

async function running(overrides: Partial<AgentConfig> = {}) {
  const scheduler = fakeScheduler(env.nc, 0);
  const t = testAgent(env.nc, overrides);
  env.agents.push(t);
  const facts = collectFacts(env.nc, t.config.poolId, t.config.runnerId);
  await t.agent.start();
  scheduler.sub.unsubscribe();
  const sessionId = `x${++n}`;
  const cmd = { type: "start", sessionId, workspaceId: WS, runnerGeneration: t.agent.generation, placementGeneration: 1, spec: { cmd: ["sleep", "600"] }, mode: "run", trigger: "initial" };
  await dispatchTo(env.nc, t, cmd as DispatchCommand);
  await facts.waitFor((f) => f.sessionId === sessionId && f.type === "running");
  const target = { sessionId, workspaceId: WS, placementGeneration: 1 };
  const rpcs = execRpcs(t.config.poolId, t.config.runnerId);
  const start = (execId: string, over: Partial<ExecStartRequest>) =>
    callRpc(env.nc, rpcs.start, { ...target, execId, cmd: ["true"], cwd: "", env: {}, stdin: "", keepStdinOpen: false, attached: false, ...over }, { timeoutMs: 10_000 });
  /** The exit written last on the process's log (waits for it). */
  const exitOf = async (execId: string): Promise<ExecExit> => {
    const consumer = await jetstream(env.nc).consumers.get(Streams.exec, { filter_subjects: [Subjects.exec(t.config.poolId, t.config.runnerId, sessionId, execId)], deliver_policy: DeliverPolicy.All });
    for await (const m of await consumer.consume()) if (m.headers?.get(Headers.execExit)) return ExecExit.parse(m.json());
    throw new Error("the log ended without an exit");
  };
  return { t, facts, sessionId, target, rpcs, start, exitOf };
}

const codeOf = (err: unknown) => (err instanceof PaddockError ? err.code : String(err));

describe("exec on the runner", () => {
  it("kills an attached command whose reader stays silent, and not one whose reader keeps crediting", async () => {
    const s = await running({ execReaderTimeoutMs: 1_000 });
    await s.start("silent", { cmd: ["sleep", "600"], attached: true });
    expect(await s.exitOf("silent")).toMatchObject({ exitCode: null, signal: "SIGKILL", timedOut: false });
    await s.start("heard", { cmd: ["sh", "-c", "read line; echo $line"], attached: true, keepStdinOpen: true });
    // Credit as a reader's heartbeat would, then let it finish through its stdin: it was never killed.
    for (let i = 0; i < 3; i++) {
      const reply = await env.nc.request(execCreditSubject(s.t.config.poolId, s.t.config.runnerId), JSON.stringify({ sessionId: s.sessionId, execId: "heard", bytes: 0 }), { timeout: 5_000 });
      expect(ExecCreditReply.parse(reply.json()).known).toBe(true);
    }
    await callRpc(env.nc, s.rpcs.input, { ...s.target, execId: "heard", data: Buffer.from("done\n").toString("base64"), eof: true }, { timeoutMs: 5_000 });
    expect(await s.exitOf("heard")).toMatchObject({ exitCode: 0, signal: null });
  });

  it("ends exec'd processes with the sandbox, each with its exit written", async () => {
    const s = await running();
    await s.start("bg", { cmd: ["sh", "-c", "trap 'exit 9' TERM; while :; do sleep 1; done"], keepStdinOpen: true });
    const listed = await callRpc(env.nc, s.rpcs.list, s.target, { timeoutMs: 5_000 });
    expect(listed.processes.map((p) => [p.id, p.exit])).toEqual([["bg", undefined]]);
    await dispatchTo(env.nc, s.t, { type: "destroy", sessionId: s.sessionId, workspaceId: WS, runnerGeneration: s.t.agent.generation, placementGeneration: 1 } as DispatchCommand);
    const exit = await s.exitOf("bg");
    expect(exit.exitCode === 9 || exit.signal !== null).toBe(true);
  });

  it("counts an exec as the session's activity (the idle policy's input)", async () => {
    const s = await running({ activityMs: 50 });
    const reports = new Collector<RunnerActivity>();
    const sub = env.nc.subscribe(Subjects.activity(s.t.config.poolId, s.t.config.runnerId), {
      callback: (_err, msg) => reports.push(RunnerActivity.parse(msg.json())),
    });
    await s.start("busy", { cmd: ["sh", "-c", "echo working"] });
    await reports.waitFor((r) => r.sessions.includes(s.sessionId));
    expect((await s.exitOf("busy")).exitCode).toBe(0);
    sub.unsubscribe();
  });

  it("refuses another placement, an unknown process, a duplicate id, a cwd outside, and a command that is not there", async () => {
    const s = await running();
    await expect(callRpc(env.nc, s.rpcs.list, { ...s.target, placementGeneration: 2 }, { timeoutMs: 5_000 })).rejects.toSatisfy((e) => codeOf(e) === "conflict");
    await expect(callRpc(env.nc, s.rpcs.signal, { ...s.target, execId: "nope", signal: "SIGKILL" }, { timeoutMs: 5_000 })).rejects.toSatisfy((e) => codeOf(e) === "not_found");
    await s.start("once", {});
    await expect(s.start("once", {})).rejects.toSatisfy((e) => codeOf(e) === "conflict");
    await expect(s.start("cwd", { cwd: "missing" })).rejects.toSatisfy((e) => codeOf(e) === "invalid");
    await expect(s.start("cmd", { cmd: ["no-such-command-here"] })).rejects.toSatisfy((e) => codeOf(e) === "invalid");
    // Credit for nobody: answered, unknown, nothing else.
    const reply = await env.nc.request(execCreditSubject(s.t.config.poolId, s.t.config.runnerId), JSON.stringify({ sessionId: s.sessionId, execId: "ghost", bytes: 5 }), { timeout: 5_000 });
    expect(ExecCreditReply.parse(reply.json()).known).toBe(false);
    const bad = await env.nc.request(execCreditSubject(s.t.config.poolId, s.t.config.runnerId), "{not json", { timeout: 5_000 });
    expect(ExecCreditReply.parse(bad.json()).known).toBe(false);
    expect((await s.exitOf("once")).exitCode).toBe(0);
  });
});
