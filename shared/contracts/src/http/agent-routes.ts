import { z } from "zod";
import { Id } from "../ids.ts";
import { Agent, AgentList, AgentPid, AgentWaited, DeclareAgentBody, PidNamespace, ResumeAgentBody, TurnBody } from "../agents.ts";
import { DEFAULT_WAIT_MS, QueryWaitMs } from "./query.ts";
import { httpRoute, json, jsonBody } from "./route.ts";

/* The agents routes (issue 26): agents inside a session declare themselves, report turns, park and resume. */

const SessionParams = z.object({ id: Id }).strict();
const AgentParams = z.object({ id: Id, agentId: Id }).strict();

/** A pid in a query string: decimal, as the sandbox sees it. */
const QueryPid = z
  .string()
  .regex(/^\d{1,7}$/, "must be a process id")
  .transform(Number)
  .pipe(AgentPid);

/** `?pidNamespace=` an inode number or `pid:[N]`. */
const QueryPidNamespace = z
  .string()
  .max(20)
  .transform((v, ctx) => {
    const parsed = PidNamespace.safeParse(/^\d+$/.test(v) ? Number(v) : v);
    if (!parsed.success) ctx.addIssue({ code: "custom", message: 'must be an inode number or "pid:[N]"' });
    return parsed.success ? parsed.data : 0;
  })
  .optional();

/** `?pid=N[&pidNamespace=NS]` of a resolve. */
export const ResolveAgentQuery = z.object({ pid: QueryPid, pidNamespace: QueryPidNamespace }).strict();

/** A turn number in a query string. */
const QueryTurn = z
  .string()
  .regex(/^\d{1,9}$/, "must be a turn number")
  .transform(Number)
  .pipe(z.number().int().min(1))
  .optional();

/** `?turn=K[&timeoutMs=N]` of a wait: until turn K ended (the agent's latest turn when absent). */
export const WaitAgentQuery = z.object({ turn: QueryTurn, timeoutMs: QueryWaitMs }).strict();

export const AgentRoutes = {
  declareAgent: httpRoute({
    method: "POST",
    path: "/v1/sessions/:id/agents",
    summary:
      "Declare an agent running in the session (with the session's own token, or its creator's): its pid as the sandbox sees it, and pidNamespace when the pid may exist in several of the session's pid namespaces. Stored as said; the same process declaring again replaces its claim (200).",
    params: SessionParams,
    body: jsonBody(DeclareAgentBody),
    responses: [json(Agent, [201, 200])],
    errors: ["forbidden", "not_found", "conflict", "too_large"],
  }),
  listAgents: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/agents",
    summary: "The session's agents, oldest first, each judged live, gone or parked now (never from a stored flag), with its lineage, turns and tokens.",
    params: SessionParams,
    responses: [json(AgentList)],
    errors: ["forbidden", "not_found"],
  }),
  resolveAgent: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/agents/resolve",
    summary: "The live agent owning process ?pid: itself or its nearest declared ancestor in its pid namespace (404 when none).",
    params: SessionParams,
    query: ResolveAgentQuery,
    responses: [json(Agent)],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  getAgent: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/agents/:agentId",
    summary: "One agent, judged now.",
    params: AgentParams,
    responses: [json(Agent)],
    errors: ["forbidden", "not_found"],
  }),
  waitAgent: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/agents/:agentId/wait",
    summary: `Long-poll until the agent's turn ?turn (its latest when absent) has ended, or it was parked, or ?timeoutMs (default ${DEFAULT_WAIT_MS}) passed: see timedOut.`,
    params: AgentParams,
    query: WaitAgentQuery,
    responses: [json(AgentWaited)],
    errors: ["forbidden", "not_found"],
  }),
  parkAgent: httpRoute({
    method: "POST",
    path: "/v1/sessions/:id/agents/:agentId/park",
    summary: "Park an agent: a marker appended, its declaration untouched; it is never live again (idempotent).",
    params: AgentParams,
    responses: [json(Agent)],
    errors: ["forbidden", "not_found", "conflict", "too_large"],
  }),
  resumeAgent: httpRoute({
    method: "POST",
    path: "/v1/sessions/:id/agents/:agentId/resume",
    summary: "Resume a parked agent as a successor with a new id (its predecessorId the parked one, which gains successorId); the same resume again answers the same successor (200).",
    params: AgentParams,
    body: jsonBody(ResumeAgentBody),
    responses: [json(Agent, [201, 200])],
    errors: ["forbidden", "not_found", "conflict", "too_large"],
  }),
  reportTurn: httpRoute({
    method: "POST",
    path: "/v1/sessions/:id/agents/:agentId/turns",
    summary: "Report a turn's start or end (ready → busy → done); tokens are summed on the agent and recorded on the session's audit events, attributed to the placement generation now.",
    params: AgentParams,
    body: jsonBody(TurnBody),
    responses: [json(Agent)],
    errors: ["forbidden", "not_found", "conflict", "too_large"],
  }),
} as const;
