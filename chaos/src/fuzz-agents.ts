/**
 * The bad-input scenario's agents case (issue 26): what a hostile or careless
 * agent does with the agents routes, on a session of its own. Turns out of
 * order (an end before a start, two starts), lineage forged in a declaration,
 * a resume of an agent that was never parked, a declaration past the
 * per-session bound, foreign pids and namespaces, and long polls abandoned by
 * their clients. Afterwards the agent's turns must be exactly what the
 * accepted calls made, the bound held, and no wait left a consumer behind.
 */
import { jetstreamManager } from "@nats-io/jetstream";
import { MAX_AGENTS_PER_SESSION, Streams, type Agent, type Session } from "@paddock/contracts";
import { api, waitFor } from "./client.ts";
import type { FuzzContext } from "./fuzz-context.ts";
import { log } from "./report.ts";

export async function agentsCase(ctx: FuzzContext): Promise<void> {
  const { stack, anomalies, nc } = ctx;
  const created = await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "exec sleep 3600"] } });
  if (created.status !== 201) return void anomalies.add("service stopped working", `agents case: create answered ${created.status}`);
  const id = (created.body as Session).id;
  const call = (method: string, path: string, body?: unknown) => api(stack.url, stack.token, method, `/v1/sessions/${id}/agents${path}`, body);
  const expectStatus = async (what: string, want: number, method: string, path: string, body?: unknown) => {
    const a = await call(method, path, body);
    sent += 1;
    if (a.status !== want) anomalies.add(a.status < 300 ? "malformed requests accepted" : "agent facts out of order", `agents ${what}: ${a.status} (want ${want}) ${JSON.stringify(a.body).slice(0, 160)}`);
    return a;
  };
  let sent = 0;
  // The session runs before its processes can declare: wait for it (a declare on a queued one is refused).
  for (let i = 0; i < 100; i++) {
    const s = await api(stack.url, stack.token, "GET", `/v1/sessions/${id}?waitFor=running&timeoutMs=10000`);
    if ((s.body as Session).state === "running") break;
  }
  const first = await expectStatus("declare", 201, "POST", "", { pid: 4_000_000, runtime: "fuzz" });
  const agentId = (first.body as Agent).id;
  await expectStatus("end before start", 409, "POST", `/${agentId}/turns`, { event: "end" });
  await expectStatus("start", 200, "POST", `/${agentId}/turns`, { event: "start", tokens: 1 });
  await expectStatus("second start", 409, "POST", `/${agentId}/turns`, { event: "start" });
  await expectStatus("forged predecessor", 400, "POST", "", { pid: 5, runtime: "fuzz", predecessorId: agentId });
  await expectStatus("resume of a live agent", 409, "POST", `/${agentId}/resume`, { pid: 6 });
  await expectStatus("foreign namespace resolve", 404, "GET", "/resolve?pid=1&pidNamespace=4026531836");

  // Long polls whose clients leave at once: none may keep a consumer on AGENTS.
  const jsm = await jetstreamManager(nc);
  const consumersBefore = (await jsm.streams.info(Streams.agents)).state.consumer_count;
  await Promise.all(
    Array.from({ length: 20 }, async () => {
      const ac = new AbortController();
      const pending = fetch(`${stack.url}/v1/sessions/${id}/agents/${agentId}/wait?timeoutMs=60000`, { signal: ac.signal, headers: { authorization: `Bearer ${stack.token}` } }).catch(() => undefined);
      setTimeout(() => ac.abort(), 50);
      await pending;
      sent += 1;
    }),
  );
  let consumersAfter = consumersBefore;
  await waitFor(async () => (consumersAfter = (await jsm.streams.info(Streams.agents)).state.consumer_count) <= consumersBefore, 5_000, 50);
  if (consumersAfter > consumersBefore) anomalies.add("waits left open", `${consumersAfter - consumersBefore} AGENTS consumers left by abandoned waits`);

  // The per-session bound: the declarations past it are refused, and nothing is written for them.
  let accepted = 1;
  for (let pid = 10; accepted < MAX_AGENTS_PER_SESSION + 3; pid++) {
    const a = await call("POST", "", { pid, runtime: "fuzz" });
    sent += 1;
    if (a.status === 201) accepted += 1;
    else if (a.status === 413) break;
    else return void anomalies.add("agent facts out of order", `agents declare ${pid}: ${a.status}`);
  }
  if (accepted !== MAX_AGENTS_PER_SESSION) anomalies.add("malformed requests accepted", `agents: ${accepted} declared against a bound of ${MAX_AGENTS_PER_SESSION}`);
  const listed = (await call("GET", "")).body as { agents: Agent[] };
  const turn = listed.agents.find((a) => a.id === agentId);
  if (listed.agents.length !== MAX_AGENTS_PER_SESSION || turn?.turn.count !== 1 || turn.usage.tokens !== 1) {
    anomalies.add("agent facts out of order", `agents after the case: ${listed.agents.length} agents, turn ${JSON.stringify(turn?.turn)} tokens ${String(turn?.usage.tokens)}`);
  }
  await api(stack.url, stack.token, "DELETE", `/v1/sessions/${id}`);
  ctx.sent.set("agents hostile calls", sent);
  log("bad-input", `agents case: ${sent} hostile agent calls`);
}
