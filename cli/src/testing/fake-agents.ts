/**
 * Agents routes of the fake gateway: each session's agents in memory, as the
 * contract's `Agent` (parsed by its schema, so a fixture cannot drift from
 * it). Declare stores the contract-parsed claim as a live agent (201; the same
 * pid and namespace again replaces its claim, 200); list and get answer them;
 * resolve answers the agent a pid belongs to — a live agent's own pid, or one
 * a test registered in `owners` — in the namespace asked for, else 404.
 */
import type { ServerResponse } from "node:http";
import { Agent, pidNamespaceInode, type AgentClaim, type HttpApi, type HttpRouteName, type QueryOf } from "@paddock/contracts";
import { fail, send, type FakeCall } from "./fake-http.ts";

export interface FakeAgents {
  /** Each session's agents, oldest first. */
  readonly bySession: Map<string, Agent[]>;
  /** `<session>/<pid>` → the id of the agent owning that (undeclared) process, e.g. an agent's child. */
  readonly owners: Map<string, string>;
}

export function newFakeAgents(): FakeAgents {
  return { bySession: new Map(), owners: new Map() };
}

/** An agent as the API answers it: a live one at turn ready/0 unless said. */
export function makeAgent(fields: Partial<Agent> & Pick<Agent, "id" | "pid">): Agent {
  return Agent.parse({
    runtime: "stand-in",
    state: "live",
    placementGeneration: 1,
    declaredAt: 1_700_000_000_000,
    turn: { state: "ready", count: 0 },
    usage: { tokens: 0 },
    ...fields,
  });
}

const ROUTES: ReadonlySet<HttpRouteName> = new Set<HttpRouteName>(["declareAgent", "listAgents", "getAgent", "resolveAgent"]);

export const isAgentRoute = (name: HttpRouteName): boolean => ROUTES.has(name);

/** Whether claim names the same namespace as ns (either unnamed: no constraint). */
function sameNamespace(a: Agent["pidNamespace"], b: Agent["pidNamespace"]): boolean {
  return a === undefined || b === undefined || pidNamespaceInode(a) === pidNamespaceInode(b);
}

/** Serves an agents route for session `id`, which the caller checked exists. */
export function handleAgents(agents: FakeAgents, id: string, call: FakeCall, res: ServerResponse): void {
  const list = agents.bySession.get(id) ?? [];
  switch (call.name) {
    case "declareAgent": {
      const claim = call.body as AgentClaim;
      const prior = list.find((a) => a.state === "live" && a.pid === claim.pid && sameNamespace(a.pidNamespace, claim.pidNamespace));
      if (prior) {
        // The claim is replaced as a whole; the agent's id, turns and tokens stay.
        const { id: agentId, state, placementGeneration, declaredAt, turn, usage } = prior;
        const next = makeAgent({ id: agentId, state, placementGeneration, declaredAt, turn, usage, ...claim, redeclaredAt: declaredAt + 1 });
        list[list.indexOf(prior)] = next;
        return send(res, 200, next);
      }
      const agent = makeAgent({ ...claim, id: `agt_${String(list.length + 1)}`, declaredAt: 1_700_000_000_000 + list.length });
      agents.bySession.set(id, [...list, agent]);
      return send(res, 201, agent);
    }
    case "listAgents":
      return send(res, 200, { agents: list });
    case "getAgent": {
      const agent = list.find((a) => a.id === (call.params as { agentId: string }).agentId);
      return agent ? send(res, 200, agent) : fail(res, 404, { code: "not_found", message: "agent not found" });
    }
    case "resolveAgent": {
      const q = call.query as QueryOf<typeof HttpApi.resolveAgent>;
      const ownerId = agents.owners.get(`${id}/${String(q.pid)}`);
      const owner = list.find((a) => a.state === "live" && (a.id === ownerId || a.pid === q.pid) && sameNamespace(a.pidNamespace, q.pidNamespace));
      return owner ? send(res, 200, owner) : fail(res, 404, { code: "not_found", message: "agent owning that process not found" });
    }
  }
  fail(res, 404, { code: "not_found", message: "no such route in the fake" });
}
