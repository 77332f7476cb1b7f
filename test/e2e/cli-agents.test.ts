/**
 * `paddock agents` against the real stack on a bwrap runner (issue 26 item
 * 8): a session's app declares itself with its own token and keeps a child;
 * the CLI lists it (table and the API's JSON), follows a reported turn,
 * resolves the child to it, and exits 1 with a clear message for a process
 * no agent owns or a session that is not there.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Agent, AgentList } from "@paddock/contracts";
import { startStack, type Stack } from "@paddock/testing";
import { runCli } from "../../cli/src/testing/run-cli.ts";
import { api, stackClient } from "./helpers.ts";

// Clear of the ranges other e2e files use: the odd halves of example-agents.test.ts's 64-uid slots.
const UID_FIRST = 500_032 + (process.pid % 1_000) * 64;
let stack: Stack;
let cli: Record<string, string>;
let session: { id: string; self: number; ns: string; child: number };

const { post, createSession, outputOf } = stackClient(() => stack);

/** The app: declares itself with the session's own token, then keeps a child and waits. */
const AGENT_SCRIPT = [
  "NS=$(readlink /proc/self/ns/pid)",
  'echo "DECL=$(curl -s -o /dev/null -w "%{http_code}" -X POST -H "authorization: Bearer $PADDOCK_TOKEN" -H "content-type: application/json" "$PADDOCK_URL/v1/sessions/$PADDOCK_SESSION_ID/agents" -d "{\\"pid\\":$$,\\"pidNamespace\\":\\"$NS\\",\\"runtime\\":\\"stand-in\\",\\"model\\":\\"m1\\"}")."',
  'sleep 600 & echo "SELF=$$ NS=$NS CHILD=$!."',
  "wait",
].join("\n");

beforeAll(async () => {
  stack = await startStack({ env: { "runner-agent": { PADDOCK_SANDBOX: "bwrap", PADDOCK_SANDBOX_UID_FIRST: String(UID_FIRST), PADDOCK_SANDBOX_UID_COUNT: "32" } } });
  cli = { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token };
  const s = await createSession({ spec: { cmd: ["bash", "-c", AGENT_SCRIPT] } });
  const out = await outputOf(s.id, (t) => /CHILD=\d+\./.test(t));
  if (!out.includes("DECL=201.")) throw new Error(`the app did not declare itself: ${out}`);
  const m = /SELF=(\d+) NS=(pid:\[\d+\]) CHILD=(\d+)\./.exec(out);
  if (!m) throw new Error("the app printed no SELF line");
  session = { id: s.id, self: Number(m[1]), ns: m[2] ?? "", child: Number(m[3]) };
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

const agentsOf = async (id: string) => ((await api(stack.url, stack.token, "GET", `/v1/sessions/${id}/agents`)).body as AgentList).agents;

describe("paddock agents", () => {
  it("lists the declared agent as a table, and as the API's JSON with --json", async () => {
    const [agent] = await agentsOf(session.id);
    expect(agent).toMatchObject({ pid: session.self, state: "live" });
    const table = await runCli(["agents", session.id], cli);
    expect(table.code, table.stderr).toBe(0);
    const [header, row, end] = table.stdout.split("\n");
    expect(header?.split(/\s+/)).toEqual(["ID", "STATE", "PID", "RUNTIME", "MODEL", "TURN", "TOKENS", "PREDECESSOR", "SUCCESSOR"]);
    expect(row?.split(/\s+/)).toEqual([agent?.id, "live", String(session.self), "stand-in", "m1", "ready/0", "0", "-", "-"]);
    expect(end).toBe("");
    const listed = await runCli(["agents", session.id, "--json"], cli);
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toEqual({ agents: await agentsOf(session.id) });
  });

  it("shows a reported turn and its tokens", async () => {
    const [agent] = await agentsOf(session.id);
    const turns = `/v1/sessions/${session.id}/agents/${agent?.id}/turns`;
    expect((await post(turns, { event: "start" })).status).toBe(200);
    expect((await runCli(["agents", session.id], cli)).stdout).toMatch(new RegExp(`^${agent?.id}\\s+live\\s+\\d+\\s+stand-in\\s+m1\\s+busy/1\\s+0\\s`, "m"));
    expect((await post(turns, { event: "end", tokens: 321 })).status).toBe(200);
    expect((await runCli(["agents", session.id], cli)).stdout).toMatch(new RegExp(`^${agent?.id}\\s+live\\s+\\d+\\s+stand-in\\s+m1\\s+done/1\\s+321\\s`, "m"));
  });

  it("--resolve PID prints the agent owning a process (its child, or itself)", async () => {
    const [agent] = await agentsOf(session.id);
    const child = await runCli(["agents", session.id, "--resolve", String(session.child), "--pid-namespace", session.ns, "--json"], cli);
    expect(child.code, child.stderr).toBe(0);
    expect((JSON.parse(child.stdout) as Agent).id).toBe(agent?.id);
    const self = await runCli(["agents", session.id, "--resolve", String(session.self)], cli);
    expect(self.code, self.stderr).toBe(0);
    expect(self.stdout).toMatch(new RegExp(`^id: +${agent?.id}$`, "m"));
    expect(self.stdout).toMatch(/^state: +live$/m);
  });

  it("a process no agent owns, or a session that is not there: exit 1 with a clear message", async () => {
    const none = await runCli(["agents", session.id, "--resolve", "4000000"], cli);
    expect(none).toEqual({ code: 1, stdout: "", stderr: `error: not_found: no agent owns process 4000000 in session ${session.id} (agent owning that process not found)\n` });
    expect(await runCli(["agents", "nosuchsession"], cli)).toMatchObject({ code: 1, stdout: "", stderr: expect.stringMatching(/^error: not_found: /) as unknown });
    // A bad PID asks nothing: a usage error.
    expect(await runCli(["agents", session.id, "--resolve", "x1"], cli)).toMatchObject({ code: 2, stdout: "" });
  });
});
