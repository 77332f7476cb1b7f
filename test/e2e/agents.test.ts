/**
 * Agents inside a session through the real stack on a bwrap runner (issue 26
 * items 1–5): a process in the sandbox declares itself with the session's own
 * token (again: its claim replaced), reads live, owns its children (resolve),
 * reports turns and tokens (a waiter is woken by the end), is parked and
 * resumed by a successor in another pid namespace (lineage, idempotent), reads
 * gone once its process is gone or the session moved, and every fact is one
 * audit event with the tokens attributed to its placement generation. Bad
 * input: foreign namespaces and pids, another session's token, forged
 * lineage, turns out of order.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Agent, AgentList, AgentWaited, ExecResult } from "@paddock/contracts";
import { connectAs, ControlPlaneUsers, startStack, untilSession, type Stack } from "@paddock/testing";
import { api, stackClient, waitForAuditEvents } from "./helpers.ts";

// Clear of the ranges other e2e files and the runner-agent tests use.
const UID_FIRST = 320_000 + (process.pid % 1_000) * 64;
let stack: Stack;
let nc: NatsConnection;

const { post, createSession, outputOf } = stackClient(() => stack);

/** The app: declares itself twice (the second replaces the claim), then keeps a child and waits. */
const AGENT_SCRIPT = [
  "NS=$(readlink /proc/self/ns/pid)",
  'decl() { curl -s -o /dev/null -w "%{http_code}" -X POST -H "authorization: Bearer $PADDOCK_TOKEN" -H "content-type: application/json" "$PADDOCK_URL/v1/sessions/$PADDOCK_SESSION_ID/agents" -d "{\\"pid\\":$$,\\"pidNamespace\\":\\"$NS\\",\\"runtime\\":\\"stand-in\\",\\"model\\":\\"$1\\"}"; }',
  'echo "FIRST=$(decl m1)."',
  'echo "AGAIN=$(decl m2)."',
  'sleep 600 & echo "SELF=$$ NS=$NS CHILD=$!."',
  "wait",
].join("\n");

interface Running {
  id: string;
  self: number;
  ns: string;
  child: number;
  output: string;
}

async function startAgentSession(): Promise<Running> {
  const s = await createSession({ spec: { cmd: ["bash", "-c", AGENT_SCRIPT] } });
  const output = await outputOf(s.id, (t) => /CHILD=\d+\./.test(t));
  const m = /SELF=(\d+) NS=(pid:\[\d+\]) CHILD=(\d+)\./.exec(output);
  if (!m) throw new Error(`no SELF line in ${output}`);
  return { id: s.id, self: Number(m[1]), ns: m[2] as string, child: Number(m[3]), output };
}

const agentsPath = (id: string) => `/v1/sessions/${id}/agents`;
const list = async (id: string) => ((await api(stack.url, stack.token, "GET", agentsPath(id))).body as AgentList).agents;

/** Runs a command in the session as its exec'd processes run (their own pid namespace); answers stdout. */
async function execIn(id: string, script: string): Promise<string> {
  const r = await post(`/v1/sessions/${id}/exec`, { cmd: ["bash", "-c", script] });
  expect(r.status).toBe(200);
  return (r.body as ExecResult).stdout;
}

/** A call made from inside the session with its own token (curl in an exec'd command): status and body. */
async function asSession(id: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> {
  const data = body === undefined ? "" : `-H "content-type: application/json" -d '${JSON.stringify(body)}'`;
  const out = await execIn(id, `curl -s -w '\\n%{http_code}' -X ${method} -H "authorization: Bearer $PADDOCK_TOKEN" ${data} "$PADDOCK_URL${path}"`);
  const at = out.lastIndexOf("\n");
  return { status: Number(out.slice(at + 1)), body: JSON.parse(out.slice(0, at) || "null") as unknown };
}

/** The first line a background process printed: its output followed as NDJSON until a line ended. */
async function firstLine(id: string, processId: string): Promise<string> {
  const ac = new AbortController();
  const res = await fetch(`${stack.url}/v1/sessions/${id}/processes/${processId}/output?since=0`, { signal: ac.signal, headers: { authorization: `Bearer ${stack.token}`, accept: "application/x-ndjson" } });
  let text = "";
  let rest = "";
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    rest += Buffer.from(chunk).toString("utf8");
    const lines = rest.split("\n");
    rest = lines.pop() ?? "";
    text += lines.map((l) => (JSON.parse(l) as { stdout?: string }).stdout ?? "").join("");
    if (text.includes("\n")) break;
  }
  ac.abort();
  return text.slice(0, text.indexOf("\n"));
}

let a: Running;
let b: Running;

beforeAll(async () => {
  // Per-service NATS credentials: the gateway appends, reads and watches AGENTS, the recorder consumes it, with only their own permissions.
  stack = await startStack({ isolated: true, env: { "runner-agent": { PADDOCK_SANDBOX: "bwrap", PADDOCK_SANDBOX_UID_FIRST: String(UID_FIRST), PADDOCK_SANDBOX_UID_COUNT: "32" } } });
  nc = await connectAs(stack.nats.url, ControlPlaneUsers.provisioner, stack.natsUsers?.[ControlPlaneUsers.provisioner] ?? "");
  [a, b] = await Promise.all([startAgentSession(), startAgentSession()]);
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

describe("declared agents", () => {
  it("a process declares itself with the session's token; declaring again replaces its claim; it reads live and owns its children", async () => {
    expect(a.output).toContain("FIRST=201.");
    expect(a.output).toContain("AGAIN=200.");
    const agents = await list(a.id);
    expect(agents).toHaveLength(1);
    expect(agents[0]).toMatchObject({ pid: a.self, pidNamespace: a.ns, runtime: "stand-in", model: "m2", state: "live", turn: { state: "ready", count: 0 }, usage: { tokens: 0 } });
    expect(agents[0]?.redeclaredAt).toBeDefined();
    // No host view ever leaves the gateway.
    expect(JSON.stringify(agents)).not.toMatch(/hostPid|startTicks/);

    const resolved = await api(stack.url, stack.token, "GET", `${agentsPath(a.id)}/resolve?pid=${a.child}&pidNamespace=${encodeURIComponent(a.ns)}`);
    expect(resolved.status).toBe(200);
    expect((resolved.body as Agent).id).toBe(agents[0]?.id);
    // The agent's own process counts as its own.
    const self = await api(stack.url, stack.token, "GET", `${agentsPath(a.id)}/resolve?pid=${a.self}&pidNamespace=${encodeURIComponent(a.ns)}`);
    expect((self.body as Agent).id).toBe(agents[0]?.id);
    // An exec'd command is in another pid namespace: nothing declared owns it.
    const [pid, ns] = (await execIn(a.id, "echo $$ $(readlink /proc/self/ns/pid)")).trim().split(" ");
    expect(ns).not.toBe(a.ns);
    expect((await api(stack.url, stack.token, "GET", `${agentsPath(a.id)}/resolve?pid=${pid}&pidNamespace=${encodeURIComponent(ns ?? "")}`)).status).toBe(404);
  });

  it("turns: ready → busy → done, tokens summed, a waiter woken by the end, out of order refused", async () => {
    const [agent] = await list(a.id);
    const turns = `${agentsPath(a.id)}/${agent?.id}/turns`;
    expect((await post(turns, { event: "end" })).status).toBe(409);
    const started = await asSession(a.id, "POST", turns, { event: "start", tokens: 5 });
    expect(started).toMatchObject({ status: 200, body: { turn: { state: "busy", count: 1 }, usage: { tokens: 5 } } });
    expect((await post(turns, { event: "start" })).status).toBe(409);
    const waiting = api(stack.url, stack.token, "GET", `${agentsPath(a.id)}/${agent?.id}/wait?timeoutMs=60000`);
    // The waiter is registered before the end only if it answers after it: it must not have timed out.
    const ended = await post(turns, { event: "end", tokens: 120 });
    expect(ended.body).toMatchObject({ turn: { state: "done", count: 1 }, usage: { tokens: 125 } });
    const waited = (await waiting).body as AgentWaited;
    expect(waited).toMatchObject({ timedOut: false, agent: { turn: { state: "done", count: 1 }, usage: { tokens: 125 } } });
    // A wait for a turn that has not started times out honestly.
    const later = (await api(stack.url, stack.token, "GET", `${agentsPath(a.id)}/${agent?.id}/wait?turn=2&timeoutMs=50`)).body as AgentWaited;
    expect(later).toMatchObject({ timedOut: true, agent: { turn: { state: "done", count: 1 } } });

    const events = await waitForAuditEvents(nc, "default", a.id, (es) => es.filter((e) => e.action === "agent.turn").length >= 2);
    const turnEvents = events.filter((e) => e.action === "agent.turn");
    expect(turnEvents.map((e) => [e.agent?.turn, e.usage.agentTokenCount])).toEqual([["start", 5], ["end", 120]]);
    expect(turnEvents.every((e) => e.placementGeneration === 1 && e.agent?.id === agent?.id)).toBe(true);
    expect(events.filter((e) => e.action === "agent.declare")).toHaveLength(2);
    // Fixed fields only: no claim text in the audit trail.
    expect(JSON.stringify(events)).not.toContain("stand-in");
  });

  it("park leaves the claim, takes no turns; resume makes a successor with lineage, idempotently", async () => {
    const [agent] = await list(a.id);
    const park = await post(`${agentsPath(a.id)}/${agent?.id}/park`);
    expect(park).toMatchObject({ status: 200, body: { state: "parked", model: "m2", pid: a.self } });
    expect((await post(`${agentsPath(a.id)}/${agent?.id}/park`)).body).toMatchObject({ state: "parked", parkedAt: (park.body as Agent).parkedAt });
    expect((await post(`${agentsPath(a.id)}/${agent?.id}/turns`, { event: "start" })).status).toBe(409);
    // The successor is a background exec'd process: another pid namespace, named.
    const started = await post(`/v1/sessions/${a.id}/exec`, { cmd: ["bash", "-c", "echo $$ $(readlink /proc/self/ns/pid); exec sleep 600"], background: true });
    expect(started.status).toBe(202);
    const processId = (started.body as { id: string }).id;
    const [pid, ns] = (await firstLine(a.id, processId)).split(" ");
    const body = { pid: Number(pid), pidNamespace: ns, model: "m3" };
    const resumed = await post(`${agentsPath(a.id)}/${agent?.id}/resume`, body);
    expect(resumed).toMatchObject({ status: 201, body: { predecessorId: agent?.id, state: "live", model: "m3", runtime: "stand-in", turn: { state: "ready", count: 0 } } });
    const successor = resumed.body as Agent;
    const again = await post(`${agentsPath(a.id)}/${agent?.id}/resume`, body);
    expect(again).toMatchObject({ status: 200, body: { id: successor.id } });
    expect((await post(`${agentsPath(a.id)}/${agent?.id}/resume`, { ...body, pid: Number(pid) + 1 })).status).toBe(409);
    // Only a parked agent is resumed.
    expect((await post(`${agentsPath(a.id)}/${successor.id}/resume`, body)).status).toBe(409);
    const agents = await list(a.id);
    expect(agents.map((x) => [x.id, x.state, x.successorId, x.predecessorId])).toEqual([
      [agent?.id, "parked", successor.id, undefined],
      [successor.id, "live", undefined, agent?.id],
    ]);
    // A parked agent never owns a process.
    expect((await api(stack.url, stack.token, "GET", `${agentsPath(a.id)}/resolve?pid=${a.child}&pidNamespace=${encodeURIComponent(a.ns)}`)).status).toBe(404);
    // The successor's process ends: it reads gone (judged now, not stored).
    await post(`/v1/sessions/${a.id}/processes/${processId}/signal`, { signal: "SIGKILL" });
    const after = await execIn(a.id, `while kill -0 ${pid} 2>/dev/null; do sleep 0.01; done; echo gone`);
    expect(after.trim()).toBe("gone");
    expect((await list(a.id)).find((x) => x.id === successor.id)?.state).toBe("gone");
  });
});

describe("bad input", () => {
  it("another session's processes and namespaces are never its own; another session's token reaches nothing", async () => {
    // Session a's route, session b's namespace and pid: stored as claimed, and gone (a cannot see it).
    const foreign = await post(agentsPath(a.id), { pid: b.self, pidNamespace: b.ns, runtime: "liar" });
    expect(foreign).toMatchObject({ status: 201, body: { state: "gone", pid: b.self } });
    expect((await api(stack.url, stack.token, "GET", `${agentsPath(a.id)}/resolve?pid=${b.child}&pidNamespace=${encodeURIComponent(b.ns)}`)).status).toBe(404);
    // A pid no process has: stored, gone.
    expect((await post(agentsPath(a.id), { pid: 4_000_000, runtime: "liar" })).body).toMatchObject({ state: "gone" });
    // Session b's token on session a's agents: not found, nothing written.
    const before = (await list(a.id)).length;
    const cross = await asSession(b.id, "POST", agentsPath(a.id), { pid: 1, runtime: "x" });
    expect(cross.status).toBe(404);
    expect((await asSession(b.id, "GET", agentsPath(a.id))).status).toBe(404);
    expect((await list(a.id)).length).toBe(before);
  });

  it("refuses malformed claims, forged lineage and bad queries as invalid, changing nothing", async () => {
    const before = (await list(b.id)).length;
    for (const body of [
      {},
      { pid: 0, runtime: "x" },
      { pid: -1, runtime: "x" },
      { pid: 1.5, runtime: "x" },
      { pid: 5_000_000, runtime: "x" },
      { pid: 1, runtime: "" },
      { pid: 1, runtime: "x\u0000y" },
      { pid: 1, runtime: "x", pidNamespace: "pid:[x]" },
      { pid: 1, runtime: "x", pidNamespace: "/proc/1/ns/pid" },
      { pid: 1, runtime: "x", predecessorId: "agt_forged" },
      { pid: 1, runtime: "x", successorId: "agt_forged" },
      { pid: 1, runtime: "x", state: "live" },
      { pid: "1", runtime: "x" },
    ]) {
      const r = await post(agentsPath(b.id), body);
      expect({ body, status: r.status, code: (r.body as { error?: { code: string } }).error?.code }).toEqual({ body, status: 400, code: "invalid" });
    }
    const [agent] = await list(b.id);
    for (const turn of [{ event: "middle" }, { event: "end", tokens: -1 }, { event: "end", tokens: 1.5 }, { event: "start", tokens: 2_000_000_000 }]) {
      expect((await post(`${agentsPath(b.id)}/${agent?.id}/turns`, turn)).status).toBe(400);
    }
    for (const q of ["pid=abc", "pid=0", "pid=1&pidNamespace=nope", "pid=1&extra=1", ""]) {
      expect((await api(stack.url, stack.token, "GET", `${agentsPath(b.id)}/resolve?${q}`)).status).toBe(400);
    }
    expect((await api(stack.url, stack.token, "GET", `${agentsPath(b.id)}/${agent?.id}/wait?turn=0`)).status).toBe(400);
    expect((await api(stack.url, stack.token, "GET", `${agentsPath(b.id)}/${agent?.id}/wait?timeoutMs=999999999`)).status).toBe(400);
    expect((await post(`${agentsPath(b.id)}/agt_nope/park`)).status).toBe(404);
    expect((await post(`${agentsPath(b.id)}/agt_nope/resume`, { pid: 1 })).status).toBe(404);
    expect((await post(`${agentsPath(b.id)}/agt_nope/turns`, { event: "start" })).status).toBe(404);
    expect((await list(b.id)).length).toBe(before);
    expect((await list(b.id))[0]).toMatchObject({ turn: { state: "ready", count: 0 }, state: "live" });
  });
});

describe("across placements", () => {
  it("a cold-resumed session keeps its agents' history, all gone; a restarted process declares as a new agent", async () => {
    const beforeIds = (await list(b.id)).map((x) => x.id);
    // A wait on a turn that will never come ends when the session's processes go (not at its timeout).
    const live = (await list(b.id)).find((x) => x.state === "live");
    const waiting = api(stack.url, stack.token, "GET", `${agentsPath(b.id)}/${live?.id}/wait?timeoutMs=300000`);
    expect((await post(`/v1/sessions/${b.id}/suspend`, { warm: false })).status).toBe(200);
    await untilSession(nc, b.id, (s) => s.state === "suspended_cold");
    expect((await waiting).body).toMatchObject({ timedOut: false, agent: { id: live?.id, state: "gone" } });
    expect((await list(b.id)).map((x) => [x.id, x.state])).toEqual(beforeIds.map((id) => [id, "gone"]));
    expect((await post(`/v1/sessions/${b.id}/resume`)).status).toBe(200);
    await untilSession(nc, b.id, (s) => s.state === "running");
    // The resumed app runs again (a new pid namespace) and declares itself anew.
    await outputOf(b.id, (t) => /NS=(pid:\[\d+\]) CHILD=/.exec(t.slice(t.lastIndexOf("SELF=")))?.[1] !== b.ns && t.includes("CHILD="));
    const agents = await list(b.id);
    expect(agents.slice(0, beforeIds.length).map((x) => [x.id, x.state])).toEqual(beforeIds.map((id) => [id, "gone"]));
    const fresh = agents.slice(beforeIds.length);
    expect(fresh).toHaveLength(1);
    expect(fresh[0]).toMatchObject({ state: "live", placementGeneration: 2 });
    // A turn on an agent of the earlier placement is refused: it must declare again (or be resumed).
    expect((await post(`${agentsPath(b.id)}/${beforeIds[0]}/turns`, { event: "start" })).status).toBe(409);
  });
});
