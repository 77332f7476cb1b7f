import { HttpApi, type Agent, type BodyInput, type JsonAnswer } from "@paddock/contracts";
import type { Transport } from "./transport.ts";

/** Options every call takes. */
interface CallOptions {
  readonly signal?: AbortSignal;
}

/** Agents inside a session (docs/agents.md): a session's own token may call these for its own session. */
export class Agents {
  constructor(private readonly t: Transport) {}

  list(sessionId: string, opts: CallOptions = {}): Promise<Agent[]> {
    return this.t.call(HttpApi.listAgents, { params: { id: sessionId }, signal: opts.signal }).then((r) => r.agents);
  }

  /** Declares the agent running as `pid` (as the sandbox sees it); the same process declaring again replaces its claim. */
  declare(sessionId: string, body: BodyInput<typeof HttpApi.declareAgent>, opts: CallOptions = {}): Promise<Agent> {
    return this.t.call(HttpApi.declareAgent, { params: { id: sessionId }, body, signal: opts.signal });
  }

  get(sessionId: string, agentId: string, opts: CallOptions = {}): Promise<Agent> {
    return this.t.call(HttpApi.getAgent, { params: { id: sessionId, agentId }, signal: opts.signal });
  }

  /** The agent owning process `pid` (itself or its nearest declared ancestor). */
  resolve(sessionId: string, pid: number, opts: CallOptions & { pidNamespace?: string } = {}): Promise<Agent> {
    return this.t.call(HttpApi.resolveAgent, { params: { id: sessionId }, query: { pid: String(pid), pidNamespace: opts.pidNamespace }, signal: opts.signal });
  }

  /** Waits until turn `turn` (the latest when absent) ended, or timeoutMs passed (see `waited`). */
  wait(sessionId: string, agentId: string, opts: CallOptions & { turn?: number; timeoutMs?: number } = {}): Promise<JsonAnswer<typeof HttpApi.waitAgent>> {
    return this.t.call(HttpApi.waitAgent, { params: { id: sessionId, agentId }, query: { turn: opts.turn === undefined ? undefined : String(opts.turn), timeoutMs: opts.timeoutMs === undefined ? undefined : String(opts.timeoutMs) }, signal: opts.signal });
  }

  park(sessionId: string, agentId: string, opts: CallOptions = {}): Promise<Agent> {
    return this.t.call(HttpApi.parkAgent, { params: { id: sessionId, agentId }, signal: opts.signal });
  }

  /** A successor of a parked agent, running as `pid` (idempotent: the same successor again). */
  resume(sessionId: string, agentId: string, body: BodyInput<typeof HttpApi.resumeAgent>, opts: CallOptions = {}): Promise<Agent> {
    return this.t.call(HttpApi.resumeAgent, { params: { id: sessionId, agentId }, body, signal: opts.signal });
  }

  /** A turn started or ended (with the tokens it used). */
  turn(sessionId: string, agentId: string, body: BodyInput<typeof HttpApi.reportTurn>, opts: CallOptions = {}): Promise<JsonAnswer<typeof HttpApi.reportTurn>> {
    return this.t.call(HttpApi.reportTurn, { params: { id: sessionId, agentId }, body, signal: opts.signal });
  }
}
