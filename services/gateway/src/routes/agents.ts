import type { ServerResponse } from "node:http";
import { callRpc } from "@paddock/bus";
import {
  agentProbeRpcs,
  ConflictError,
  DEFAULT_WAIT_MS,
  HttpApi,
  isTerminal,
  MAX_AGENTS_PER_SESSION,
  NotFoundError,
  PaddockError,
  pidNamespaceInode,
  Subjects,
  TooLargeError,
  type Agent,
  type AgentClaim,
  type AgentFact,
  type ProcessSeen,
  type Scope,
  type Session,
} from "@paddock/contracts";
import { Action } from "../auth/auth.ts";
import { sessionResource, type GatewayContext } from "../context.ts";
import type { Route } from "../http/http.ts";
import { AgentLog, type AgentLogState, type AgentRecord } from "./agent-log.ts";
import { watchSession } from "./wait-state.ts";

/** How long a declaration waits for its session's record to say it started (the runner's start fact behind its processes). */
const START_WAIT_MS = 10_000;

/** The agent an answer shows: its claim, lineage, turns and tokens, and its liveness as judged now (never the host's view). */
function viewOf(a: AgentRecord, live: boolean): Agent {
  return {
    ...a.claim,
    id: a.id,
    state: a.parkedAt !== undefined ? "parked" : live ? "live" : "gone",
    placementGeneration: a.placementGeneration,
    declaredAt: a.declaredAt,
    ...(a.redeclaredAt !== undefined ? { redeclaredAt: a.redeclaredAt } : {}),
    ...(a.parkedAt !== undefined ? { parkedAt: a.parkedAt } : {}),
    ...(a.predecessorId !== undefined ? { predecessorId: a.predecessorId } : {}),
    ...(a.successorId !== undefined ? { successorId: a.successorId } : {}),
    turn: { ...a.turn },
    usage: { tokens: a.tokens },
  };
}

/** Whether the session has a sandbox its agents could be alive in (a warm-suspended one's processes are frozen, not gone). */
function hasSandbox(s: Session): s is Session & { poolId: string; runnerId: string } {
  return (s.state === "running" || s.state === "suspended_warm") && s.poolId !== undefined && s.runnerId !== undefined;
}

/** Declared in this placement, not parked, and seen by the runner when it declared: only these can be live. */
function judgeable(s: Session, a: AgentRecord): a is AgentRecord & { seen: ProcessSeen } {
  return a.parkedAt === undefined && a.seen !== undefined && a.placementGeneration === s.placementGeneration && a.runnerId === s.runnerId;
}

/**
 * The agents routes (issue 26, docs/agents.md). Facts live on stream AGENTS
 * (agent-log.ts); whether an agent is live is asked of the runner holding
 * the session each time it is read — a pid alive in the sandbox and still
 * the process that declared (its start time) — never stored.
 */
export function agentRoutes(ctx: GatewayContext): Route[] {
  const log = new AgentLog(ctx.deps.nc, () => ctx.jsm());
  const rpcOpts = { timeoutMs: ctx.deps.config.workspaceRpcTimeoutMs };
  const probe = (s: Session & { poolId: string; runnerId: string }) => ({ rpcs: agentProbeRpcs(s.poolId, s.runnerId), target: { sessionId: s.id, workspaceId: s.workspaceId, placementGeneration: s.placementGeneration } });

  const session = async (scope: Scope, id: string, action: Action): Promise<Session> => {
    const found = await ctx.getSession(scope, id);
    await ctx.authorizer.authorize(scope, action, sessionResource(found));
    return found;
  };

  /**
   * The session once its record says it started: a process that declares
   * itself the moment it starts can be ahead of the runner's start fact (the
   * record still `creating`), so that is waited for, on the record's facts
   * and bounded, rather than refused.
   */
  const started = (scope: Scope, s: Session, res: ServerResponse): Promise<Session> =>
    s.state !== "creating" ? Promise.resolve(s) : watchSession(ctx, scope, s, (current, over) => (current.state !== "creating" || over ? current : undefined), START_WAIT_MS, res);

  /** Liveness of each agent, judged now: one question to the runner for all the ones that could be live. */
  const judge = async (s: Session, agents: readonly AgentRecord[]): Promise<Set<string>> => {
    const candidates = agents.filter((a) => judgeable(s, a));
    if (candidates.length === 0 || !hasSandbox(s)) return new Set();
    const { rpcs, target } = probe(s);
    try {
      const { alive } = await callRpc(ctx.deps.nc, rpcs.check, { ...target, processes: candidates.map((a) => a.seen) }, rpcOpts);
      return new Set(candidates.filter((_, i) => alive[i] === true).map((a) => a.id));
    } catch (err) {
      // The runner no longer holds this placement (it ended or moved meanwhile): none of them is alive.
      if (err instanceof PaddockError && err.code === "conflict") return new Set();
      throw err;
    }
  };

  const views = async (s: Session, agents: readonly AgentRecord[]): Promise<Agent[]> => {
    const live = await judge(s, agents);
    return agents.map((a) => viewOf(a, live.has(a.id)));
  };

  const agentOf = (state: AgentLogState, agentId: string): AgentRecord => {
    const a = state.agents.get(agentId);
    if (!a) throw new NotFoundError("agent");
    return a;
  };

  /** What the runner sees of a claimed pid in the running session (unset: no such process of the session). */
  const find = async (s: Session, claim: Pick<AgentClaim, "pid" | "pidNamespace">): Promise<{ seen: ProcessSeen | undefined; runnerId: string }> => {
    if (s.state !== "running" || !hasSandbox(s)) throw new ConflictError(`session is ${s.state}: only a running session's processes can declare`);
    const { rpcs, target } = probe(s);
    const ns = claim.pidNamespace === undefined ? undefined : pidNamespaceInode(claim.pidNamespace);
    const r = await callRpc(ctx.deps.nc, rpcs.find, { ...target, pid: claim.pid, ...(ns !== undefined ? { pidNamespace: ns } : {}) }, rpcOpts);
    if (r.matches > 1) throw new ConflictError(`pid ${claim.pid} is a process in ${r.matches} of the session's pid namespaces: say which with pidNamespace (readlink /proc/self/ns/pid)`);
    return { seen: r.seen, runnerId: s.runnerId };
  };

  const base = (scope: Scope, s: Session, agentId: string) => ({ id: ctx.deps.newId(), agentId, at: ctx.deps.now(), actorId: scope.actor.id, creatorId: s.creatorId, placementGeneration: s.placementGeneration });

  const sameProcess = (a: AgentRecord, claim: AgentClaim, seen: ProcessSeen | undefined, s: Session): boolean => {
    if (a.parkedAt !== undefined || a.placementGeneration !== s.placementGeneration) return false;
    if (seen && a.seen) return seen.hostPid === a.seen.hostPid && seen.startTicks === a.seen.startTicks && seen.pidNamespace === a.seen.pidNamespace;
    return !seen && !a.seen && a.claim.pid === claim.pid && nsOf(a.claim) === nsOf(claim);
  };

  const declare = async (scope: Scope, s: Session, claim: AgentClaim): Promise<{ agent: AgentRecord; created: boolean }> => {
    const { seen, runnerId } = await find(s, claim);
    let created = false;
    let agentId = "";
    const { state } = await log.append(s.workspaceId, s.id, (st) => {
      const existing = [...st.agents.values()].find((a) => sameProcess(a, claim, seen, s));
      created = existing === undefined;
      if (created && st.agents.size >= MAX_AGENTS_PER_SESSION) throw new TooLargeError(`the session has ${MAX_AGENTS_PER_SESSION} agents, its most`);
      agentId = existing?.id ?? ctx.deps.newId();
      return { ...base(scope, s, agentId), type: "declare", claim, ...(seen ? { seen } : {}), runnerId };
    });
    return { agent: agentOf(state, agentId), created };
  };

  const resume = async (scope: Scope, s: Session, agentId: string, body: Partial<AgentClaim> & { pid: number }): Promise<{ agent: AgentRecord; created: boolean }> => {
    const { pidNamespace: _, ...kept } = agentOf(await log.read(s.workspaceId, s.id), agentId).claim;
    // The successor's namespace is the one it names: the parked one's need not hold for a new process.
    const claim: AgentClaim = { ...kept, ...body };
    const { seen, runnerId } = await find(s, claim);
    const { fact, state } = await log.append(s.workspaceId, s.id, (st) => {
      const parked = agentOf(st, agentId);
      if (parked.parkedAt === undefined) throw new ConflictError("agent is not parked: park it before resuming it");
      if (parked.successorId !== undefined) {
        const successor = agentOf(st, parked.successorId);
        if (successor.claim.pid !== claim.pid || nsOf(successor.claim) !== nsOf(claim)) throw new ConflictError(`agent was already resumed as ${successor.id} (pid ${successor.claim.pid})`);
        return undefined;
      }
      if (st.agents.size >= MAX_AGENTS_PER_SESSION) throw new TooLargeError(`the session has ${MAX_AGENTS_PER_SESSION} agents, its most`);
      return { ...base(scope, s, agentId), type: "resume", successorId: ctx.deps.newId(), claim, ...(seen ? { seen } : {}), runnerId };
    });
    const successorId = fact?.type === "resume" ? fact.successorId : agentOf(state, agentId).successorId;
    return { agent: agentOf(state, successorId ?? ""), created: fact !== undefined };
  };

  const park = async (scope: Scope, s: Session, agentId: string): Promise<AgentRecord> => {
    const { state } = await log.append(s.workspaceId, s.id, (st) => (agentOf(st, agentId).parkedAt !== undefined ? undefined : { ...base(scope, s, agentId), type: "park" }));
    return agentOf(state, agentId);
  };

  const turn = async (scope: Scope, s: Session, agentId: string, event: "start" | "end", tokens: number | undefined): Promise<AgentRecord> => {
    if (s.state !== "running") throw new ConflictError(`session is ${s.state}: turns are reported by a running session's agents`);
    const { state } = await log.append(s.workspaceId, s.id, (st) => {
      const a = agentOf(st, agentId);
      if (a.parkedAt !== undefined) throw new ConflictError("agent is parked: a parked agent takes no turns (resume it)");
      if (a.placementGeneration !== s.placementGeneration) throw new ConflictError("agent was declared in an earlier placement of the session: declare it again");
      if (event === "start" && a.turn.state === "busy") throw new ConflictError(`turn ${a.turn.count} has not ended: end it before starting another`);
      if (event === "end" && a.turn.state !== "busy") throw new ConflictError("no turn has started: start one before ending it");
      const fact: AgentFact = { ...base(scope, s, agentId), type: "turn", event, ...(tokens !== undefined ? { tokens } : {}) };
      return fact;
    });
    return agentOf(state, agentId);
  };

  /**
   * Whether waiting for turn K is over: it ended, a later one started, or the
   * agent can take no more turns (parked, of an earlier placement, its
   * session ended or cold-suspended: its process is gone). A warm-suspended
   * session's agent is frozen, not gone: the wait goes on through a resume.
   */
  const waitOver = (s: Session, a: AgentRecord, turnNo: number): boolean =>
    a.parkedAt !== undefined ||
    a.placementGeneration !== s.placementGeneration ||
    isTerminal(s.state) ||
    s.state === "suspended_cold" ||
    a.turn.count > turnNo ||
    (a.turn.count === turnNo && a.turn.state === "done");

  /**
   * Waits until `over` holds for the agent and its session (or the time is
   * up, or the client left). Core subscriptions wake it: the session's agent
   * log (JetStream stores what is published there, so every append is seen)
   * and its audit subject (every committed change of the record: a suspend,
   * an end, a move). They hold nothing on the server, so an abandoned wait
   * leaves nothing behind, and they are live before the first read, so no
   * change falls between a read and the wait.
   */
  const waitFor = async (
    scope: Scope,
    first: Session,
    agentId: string,
    ms: number,
    res: ServerResponse,
    over: (s: Session, a: AgentRecord) => boolean,
  ): Promise<{ session: Session; state: AgentLogState; timedOut: boolean }> => {
    const subs = [Subjects.agents(first.workspaceId, first.id), Subjects.audit(first.workspaceId, "session", first.id)].map((subject) => ctx.deps.nc.subscribe(subject));
    let wake: () => void = () => undefined;
    let done = false;
    const finish = () => {
      done = true;
      wake();
    };
    for (const sub of subs) {
      void (async () => {
        for await (const m of sub) {
          void m;
          wake();
        }
      })();
    }
    const cancel = ctx.after(ms, finish);
    res.once("close", finish);
    try {
      await ctx.deps.nc.flush();
      let session = first;
      for (let read = 0; ; read++) {
        const woken = new Promise<void>((resolve) => (wake = resolve));
        // The record the caller was authorized on is current at the first read; later ones follow its changes.
        if (read > 0) session = await ctx.getSession(scope, first.id).catch((err: unknown) => ended(err, session));
        const state = await log.read(session.workspaceId, session.id);
        if (over(session, agentOf(state, agentId))) return { session, state, timedOut: false };
        if (done || res.destroyed) return { session, state, timedOut: true };
        await woken;
      }
    } finally {
      cancel();
      res.off("close", finish);
      for (const sub of subs) sub.unsubscribe();
    }
  };

  return [
    ctx.serve(HttpApi.declareAgent, async (input) => {
      const s = await started(input.caller.scope, await session(input.caller.scope, input.params.id, Action.writeAgents), input.res);
      const { agent, created } = await declare(input.caller.scope, s, await input.body());
      return { status: created ? 201 : 200, body: (await views(s, [agent]))[0] as Agent };
    }),
    ctx.serve(HttpApi.listAgents, async (input) => {
      const s = await session(input.caller.scope, input.params.id, Action.readAgents);
      const state = await log.read(s.workspaceId, s.id);
      return { status: 200, body: { agents: await views(s, [...state.agents.values()]) } };
    }),
    ctx.serve(HttpApi.resolveAgent, async (input) => {
      const s = await session(input.caller.scope, input.params.id, Action.readAgents);
      const declared = [...(await log.read(s.workspaceId, s.id)).agents.values()].filter((a) => judgeable(s, a));
      if (declared.length === 0 || !hasSandbox(s)) throw new NotFoundError("agent owning that process");
      const { rpcs, target } = probe(s);
      const ns = input.query.pidNamespace === undefined ? undefined : pidNamespaceInode(input.query.pidNamespace);
      const r = await callRpc(ctx.deps.nc, rpcs.resolve, { ...target, pid: input.query.pid, ...(ns !== undefined ? { pidNamespace: ns } : {}), declared: declared.map((a) => a.seen) }, rpcOpts);
      if (r.matches > 1) throw new ConflictError(`pid ${input.query.pid} is a process in ${r.matches} of the session's pid namespaces: say which with pidNamespace`);
      const owner = r.index === undefined ? undefined : declared[r.index];
      if (!owner) throw new NotFoundError("agent owning that process");
      return { status: 200, body: viewOf(owner, true) };
    }),
    ctx.serve(HttpApi.getAgent, async (input) => {
      const s = await session(input.caller.scope, input.params.id, Action.readAgents);
      const a = agentOf(await log.read(s.workspaceId, s.id), input.params.agentId);
      return { status: 200, body: (await views(s, [a]))[0] as Agent };
    }),
    ctx.serve(HttpApi.waitAgent, async (input) => {
      const s = await session(input.caller.scope, input.params.id, Action.readAgents);
      const first = agentOf(await log.read(s.workspaceId, s.id), input.params.agentId);
      const turnNo = input.query.turn ?? Math.max(first.turn.count, 1);
      const waited = await waitFor(input.caller.scope, s, input.params.agentId, input.query.timeoutMs ?? DEFAULT_WAIT_MS, input.res, (now, a) => waitOver(now, a, turnNo));
      const agent = (await views(waited.session, [agentOf(waited.state, input.params.agentId)]))[0] as Agent;
      const { timedOut } = waited;
      return { status: 200, body: { agent, timedOut } };
    }),
    ctx.serve(HttpApi.parkAgent, async (input) => {
      const s = await session(input.caller.scope, input.params.id, Action.writeAgents);
      return { status: 200, body: viewOf(await park(input.caller.scope, s, input.params.agentId), false) };
    }),
    ctx.serve(HttpApi.resumeAgent, async (input) => {
      const s = await started(input.caller.scope, await session(input.caller.scope, input.params.id, Action.writeAgents), input.res);
      const { agent, created } = await resume(input.caller.scope, s, input.params.agentId, await input.body());
      return { status: created ? 201 : 200, body: (await views(s, [agent]))[0] as Agent };
    }),
    ctx.serve(HttpApi.reportTurn, async (input) => {
      const s = await session(input.caller.scope, input.params.id, Action.writeAgents);
      const { event, tokens } = await input.body();
      const a = await turn(input.caller.scope, s, input.params.agentId, event, tokens);
      return { status: 200, body: (await views(s, [a]))[0] as Agent };
    }),
  ];
}

/** A session whose record went away while waited on (its retention passed): it ended. */
function ended(err: unknown, last: Session): Session {
  if (err instanceof PaddockError && err.code === "not_found") return { ...last, state: "destroyed" };
  throw err;
}

/** A claim's pid namespace as an inode (undefined when it named none). */
function nsOf(claim: Pick<AgentClaim, "pidNamespace">): number | undefined {
  return claim.pidNamespace === undefined ? undefined : pidNamespaceInode(claim.pidNamespace);
}
