import { jetstream, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { decodeJson, encoderOf, isWrongLastSequence } from "@paddock/bus";
import {
  AgentFact,
  ConflictError,
  MAX_AGENT_FACTS_PER_SESSION,
  Streams,
  Subjects,
  TooLargeError,
  type AgentClaim,
  type ProcessSeen,
  type TurnState,
} from "@paddock/contracts";
import { readRange } from "../terminal/termlog.ts";

/** One agent as its session's facts make it (liveness aside: that is judged on read, never folded). */
export interface AgentRecord {
  id: string;
  claim: AgentClaim;
  seen: ProcessSeen | undefined;
  runnerId: string;
  placementGeneration: number;
  declaredAt: number;
  redeclaredAt?: number;
  parkedAt?: number;
  predecessorId?: string;
  successorId?: string;
  turn: { state: TurnState; count: number };
  tokens: number;
}

/** A session's agent log folded up to `seq` (its last fact's stream sequence; 0: none yet). */
export interface AgentLogState {
  seq: number;
  facts: number;
  /** In declaration order. */
  agents: Map<string, AgentRecord>;
}

function declared(fact: Extract<AgentFact, { type: "declare" | "resume" }>, id: string): AgentRecord {
  return {
    id,
    claim: fact.claim,
    seen: fact.seen,
    runnerId: fact.runnerId,
    placementGeneration: fact.placementGeneration,
    declaredAt: fact.at,
    turn: { state: "ready", count: 0 },
    tokens: 0,
  };
}

/**
 * Applies one fact. The appender checked it against the state it was built
 * on (expected last sequence), so every fact here was valid when written; a
 * fact about an agent the log no longer holds (expired) changes nothing.
 */
export function applyFact(state: AgentLogState, fact: AgentFact, seq: number): void {
  state.seq = seq;
  state.facts += 1;
  const agent = state.agents.get(fact.agentId);
  switch (fact.type) {
    case "declare":
      if (agent) {
        // The same process declaring again: its claim replaced, its turns, tokens and lineage kept.
        agent.claim = fact.claim;
        agent.seen = fact.seen;
        agent.redeclaredAt = fact.at;
      } else {
        state.agents.set(fact.agentId, declared(fact, fact.agentId));
      }
      return;
    case "park":
      if (agent && agent.parkedAt === undefined) agent.parkedAt = fact.at;
      return;
    case "resume":
      if (!agent) return;
      agent.successorId = fact.successorId;
      state.agents.set(fact.successorId, { ...declared(fact, fact.successorId), predecessorId: agent.id });
      return;
    case "turn":
      if (!agent) return;
      if (fact.event === "start") agent.turn = { state: "busy", count: agent.turn.count + 1 };
      else agent.turn = { state: "done", count: agent.turn.count };
      agent.tokens += fact.tokens ?? 0;
      return;
  }
}

/** Folded logs kept per gateway: a read then costs one direct get of what came after. */
const MAX_CACHED_LOGS = 1_024;
/** Appends retried when another gateway appended first (each re-reads and re-checks). */
const MAX_APPEND_ATTEMPTS = 16;
/** The most a lost append waits before its next try: a random wait up to 2^attempt ms, so racing gateways take turns. */
const MAX_APPEND_BACKOFF_MS = 64;

/**
 * The agents' facts of each session, on stream AGENTS: read by folding the
 * session's subject (incrementally, from a per-gateway cache of folded
 * logs), appended under an expected-last-subject-sequence check so that a
 * fact is only ever written against the state it was checked on, whichever
 * gateway replica wrote the one before.
 */
export class AgentLog {
  private readonly cache = new Map<string, AgentLogState>();
  /** Appends in flight per session: one at a time here, so only another gateway's append can make one retry. */
  private readonly appending = new Map<string, Promise<unknown>>();
  private readonly encode;

  constructor(
    private readonly nc: NatsConnection,
    private readonly jsm: () => Promise<JetStreamManager>,
  ) {
    this.encode = encoderOf(nc);
  }

  /** The session's agents as its log holds them now. */
  async read(workspaceId: string, sessionId: string): Promise<AgentLogState> {
    const subject = Subjects.agents(workspaceId, sessionId);
    const cached = this.cache.get(subject);
    // A copy is folded on: a concurrent reader of the cached state never sees it half-applied.
    const state: AgentLogState = cached ? { seq: cached.seq, facts: cached.facts, agents: cloneAgents(cached.agents) } : { seq: 0, facts: 0, agents: new Map() };
    for await (const m of readRange(await this.jsm(), Streams.agents, subject, state.seq + 1)) {
      const decoded = decodeJson(AgentFact, m.data);
      // Only gateways write here, through the contract: a fact that does not parse is skipped, not fatal.
      if (decoded.ok) applyFact(state, decoded.value, m.seq);
      else state.seq = m.seq;
    }
    this.remember(subject, state);
    return state;
  }

  /**
   * Appends the fact `build` makes from the log as it is (build throws to
   * refuse: conflict, not_found...; answers undefined when the log already
   * holds what was asked, an idempotent repeat), re-reading and re-building
   * when another writer got there first. Answers the fact appended, if any,
   * and the log with it applied.
   */
  append(workspaceId: string, sessionId: string, build: (state: AgentLogState) => AgentFact | undefined): Promise<{ fact?: AgentFact; state: AgentLogState }> {
    const subject = Subjects.agents(workspaceId, sessionId);
    const before = this.appending.get(subject) ?? Promise.resolve();
    const mine = before.then(
      () => this.appendNow(workspaceId, sessionId, build),
      () => this.appendNow(workspaceId, sessionId, build),
    );
    const settled = mine.catch(() => undefined);
    this.appending.set(subject, settled);
    void settled.then(() => {
      if (this.appending.get(subject) === settled) this.appending.delete(subject);
    });
    return mine;
  }

  private async appendNow(workspaceId: string, sessionId: string, build: (state: AgentLogState) => AgentFact | undefined): Promise<{ fact?: AgentFact; state: AgentLogState }> {
    const subject = Subjects.agents(workspaceId, sessionId);
    const js = jetstream(this.nc);
    for (let attempt = 0; attempt < MAX_APPEND_ATTEMPTS; attempt++) {
      const state = await this.read(workspaceId, sessionId);
      if (state.facts >= MAX_AGENT_FACTS_PER_SESSION) throw new TooLargeError(`the session's agent log holds ${MAX_AGENT_FACTS_PER_SESSION} facts, its most`);
      const fact = build(state);
      if (!fact) return { state };
      try {
        const ack = await js.publish(subject, this.encode(AgentFact, fact), { msgID: fact.id, expect: { lastSubjectSequence: state.seq } });
        const next = { seq: state.seq, facts: state.facts, agents: cloneAgents(state.agents) };
        applyFact(next, fact, ack.seq);
        this.remember(subject, next);
        return { fact, state: next };
      } catch (err) {
        if (!isWrongLastSequence(err)) throw err;
        await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(MAX_APPEND_BACKOFF_MS, 2 ** attempt)));
      }
    }
    throw new ConflictError("the session's agents changed too often meanwhile; retry");
  }

  private remember(subject: string, state: AgentLogState): void {
    const known = this.cache.get(subject);
    if (known && known.seq >= state.seq) return;
    this.cache.delete(subject);
    if (this.cache.size >= MAX_CACHED_LOGS) {
      const oldest = this.cache.keys().next();
      if (!oldest.done) this.cache.delete(oldest.value);
    }
    this.cache.set(subject, state);
  }
}

function cloneAgents(agents: Map<string, AgentRecord>): Map<string, AgentRecord> {
  return new Map([...agents].map(([id, a]) => [id, { ...a, turn: { ...a.turn } }]));
}
