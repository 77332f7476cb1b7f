/**
 * Agents on the `process` backend (development only; issue 26): the
 * session's processes are its apps' process groups in the host's pid
 * namespace. A declared app process reads live and owns its children; a
 * runner process outside the session's groups (the runner itself) is never
 * found or resolved, and an ended process reads gone.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Agent, AgentList } from "@paddock/contracts";
import { startStack, type Stack } from "@paddock/testing";
import { api, stackClient } from "./helpers.ts";

let stack: Stack;
const { post, createSession, outputOf } = stackClient(() => stack);

beforeAll(async () => {
  stack = await startStack({ env: { "runner-agent": { PADDOCK_SANDBOX: "process" } } });
});
afterAll(async () => {
  await stack?.stop();
});

const SCRIPT = [
  'curl -s -w "DECLARED=%{http_code}." -o /dev/null -X POST -H "authorization: Bearer $PADDOCK_TOKEN" -H "content-type: application/json" "$PADDOCK_URL/v1/sessions/$PADDOCK_SESSION_ID/agents" -d "{\\"pid\\":$$,\\"runtime\\":\\"dev\\"}"',
  'sleep 600 & echo "SELF=$$ CHILD=$! PARENT=$PPID."',
  "wait",
].join("\n");

describe("agents on the process backend", () => {
  it("a declared app process is live and owns its children; nothing outside its groups is found; once it ends it is gone", async () => {
    const s = await createSession({ spec: { cmd: ["bash", "-c", SCRIPT] } });
    const out = await outputOf(s.id, (t) => /PARENT=\d+\./.test(t));
    expect(out).toContain("DECLARED=201.");
    const [, self, child, parent] = /SELF=(\d+) CHILD=(\d+) PARENT=(\d+)\./.exec(out) ?? [];
    const agents = ((await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}/agents`)).body as AgentList).agents;
    expect(agents).toHaveLength(1);
    expect(agents[0]).toMatchObject({ pid: Number(self), state: "live" });
    const resolved = await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}/agents/resolve?pid=${child}`);
    expect((resolved.body as Agent).id).toBe(agents[0]?.id);
    // The app's parent is the runner's PTY helper or the runner itself: not the session's, never resolved.
    expect((await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}/agents/resolve?pid=${parent}`)).status).toBe(404);
    // Declaring the runner's pid: stored as claimed, gone (it is not among the session's processes).
    expect((await post(`/v1/sessions/${s.id}/agents`, { pid: Number(parent), runtime: "liar" })).body).toMatchObject({ state: "gone" });
    // The app is restarted: the declared process is gone, so the agent reads gone (judged now, not stored).
    const ended = await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/apps/main/restart`);
    expect(ended.status).toBe(200);
    // The next generation's process has declared itself: the runner ended the old one before starting it.
    await outputOf(s.id, (t) => [...t.matchAll(/SELF=(\d+) CHILD/g)].some((m) => m[1] !== self));
    const after = ((await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}/agents`)).body as AgentList).agents;
    expect(after.find((a) => a.id === agents[0]?.id)?.state).toBe("gone");
  });
});
