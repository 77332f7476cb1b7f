import { z } from "zod";
import { EpochMs, Generation, Id } from "./ids.ts";
import { runnerOpSubject } from "./workspace.ts";
import type { Rpc } from "./rpc.ts";

/*
 * Agents inside a session (issue 26; seeds 003 and 002): a process in the
 * sandbox declares itself — a claim, stored as said —, reports its turns and
 * their tokens, parks, and is resumed by a successor. The facts are a log per
 * session on stream AGENTS (`paddock.agents.<workspace>.<session>`), appended
 * by the gateway under an expected-last-sequence check and folded on read;
 * liveness is never stored: it is judged when read, by the runner holding the
 * session, from what the runner saw of the process when it declared.
 */

/** Agents one session may declare in all (successors included): the log is folded on every read. */
export const MAX_AGENTS_PER_SESSION = 256;
/** Facts one session's agent log keeps (turns included): past it, declaring and turns answer too_large. */
export const MAX_AGENT_FACTS_PER_SESSION = 100_000;
/** Tokens one turn report may carry. */
export const MAX_TURN_TOKENS = 1_000_000_000;
/** The largest pid Linux gives (pid_max's ceiling). */
export const MAX_PID = 4_194_304;

/** A process id as the sandbox sees it. */
export const AgentPid = z.number().int().min(1).max(MAX_PID);

/**
 * A pid namespace: its inode number, or `readlink /proc/self/ns/pid` as is
 * (`pid:[4026532301]`). A session's apps and its exec'd commands each live in
 * a pid namespace of their own, so a pid alone may name a process in several:
 * the namespace says which (docs/agents.md).
 */
export const PidNamespace = z.union([
  z.number().int().min(1).max(2 ** 32 - 1),
  z.string().regex(/^pid:\[\d{1,10}\]$/, 'must be an inode number or "pid:[N]" as readlink /proc/self/ns/pid prints it'),
]);
export type PidNamespace = z.infer<typeof PidNamespace>;

/** The inode number of a PidNamespace value. */
export function pidNamespaceInode(ns: PidNamespace): number {
  return typeof ns === "number" ? ns : Number(ns.slice(5, -1));
}

/** A short free-text claim field (model, harness id, version...): printable, one line. */
const ClaimText = z
  .string()
  .min(1)
  .max(256)
  .regex(/^[^\x00-\x1f\x7f]+$/, "must be printable text on one line");

/** An agent's self-declaration: what it says it is. Stored as said (seed 003: a claim, not an observation). */
export const AgentClaim = z
  .object({
    pid: AgentPid,
    pidNamespace: PidNamespace.optional(),
    /** What runs the agent (a harness name such as `claude-code`, `codex`, a script). */
    runtime: ClaimText.max(64),
    model: ClaimText.optional(),
    /** The harness's own id for its session. */
    harnessId: ClaimText.optional(),
    /** The id of the handoff that started it (a successor with a fresh context). */
    handoffId: ClaimText.optional(),
    tmuxName: ClaimText.optional(),
    version: ClaimText.optional(),
  })
  .strict();
export type AgentClaim = z.infer<typeof AgentClaim>;

/** POST /v1/sessions/:id/agents. */
export const DeclareAgentBody = AgentClaim;
export type DeclareAgentBody = z.infer<typeof DeclareAgentBody>;

/** POST …/agents/:agentId/resume: the successor's pid, and what of the claim changed (the rest is the parked one's). */
export const ResumeAgentBody = AgentClaim.partial().required({ pid: true }).strict();
export type ResumeAgentBody = z.infer<typeof ResumeAgentBody>;

export const TurnEvent = z.enum(["start", "end"]);
export type TurnEvent = z.infer<typeof TurnEvent>;

/** POST …/agents/:agentId/turns. */
export const TurnBody = z.object({ event: TurnEvent, tokens: z.number().int().min(0).max(MAX_TURN_TOKENS).optional() }).strict();
export type TurnBody = z.infer<typeof TurnBody>;

/**
 * What the runner saw of a declared process: the host's view of it, kept only
 * on the bus (never answered to a client). Unset fields: it saw no such process.
 */
export const ProcessSeen = z
  .object({
    /** Its pid on the runner's host. */
    hostPid: z.number().int().min(1).max(MAX_PID),
    /** Its start time in clock ticks since boot (/proc/<pid>/stat field 22): a reused pid has another. */
    startTicks: z.number().int().nonnegative(),
    /** The inode of the pid namespace the claimed pid is in. */
    pidNamespace: z.number().int().min(1),
  })
  .strict();
export type ProcessSeen = z.infer<typeof ProcessSeen>;

/** Where a fact was appended: the placement it was made under (a moved session's agents are gone). */
const FactBase = z.object({
  /** The fact's id, also its AUDIT event's id (exactly one event per fact). */
  id: Id,
  agentId: Id,
  at: EpochMs,
  actorId: Id,
  /** The session's creator (the audit event's resource). */
  creatorId: Id,
  placementGeneration: Generation,
});

/** One fact of a session's agent log (stream AGENTS). */
export const AgentFact = z.discriminatedUnion("type", [
  /** A declaration; `agentId` of an existing agent when the same process declared again (its claim replaced). */
  FactBase.extend({ type: z.literal("declare"), claim: AgentClaim, seen: ProcessSeen.optional(), runnerId: Id }).strict(),
  /** A parked marker: the declaration stays as it was. */
  FactBase.extend({ type: z.literal("park") }).strict(),
  /** The parked agent `agentId` resumed by a new agent `successorId`. */
  FactBase.extend({ type: z.literal("resume"), successorId: Id, claim: AgentClaim, seen: ProcessSeen.optional(), runnerId: Id }).strict(),
  FactBase.extend({ type: z.literal("turn"), event: TurnEvent, tokens: z.number().int().min(0).max(MAX_TURN_TOKENS).optional() }).strict(),
]);
export type AgentFact = z.infer<typeof AgentFact>;

export const AgentState = z.enum(["live", "gone", "parked"]);
export type AgentState = z.infer<typeof AgentState>;
export const TurnState = z.enum(["ready", "busy", "done"]);
export type TurnState = z.infer<typeof TurnState>;

/** An agent as the API answers it: its claim, its lineage, its turns and tokens, and its liveness judged now. */
export const Agent = AgentClaim.extend({
  id: Id,
  state: AgentState,
  /** The placement it declared in (a later one reads it as gone). */
  placementGeneration: Generation,
  declaredAt: EpochMs,
  /** When the claim was last replaced by the same process declaring again. */
  redeclaredAt: EpochMs.optional(),
  parkedAt: EpochMs.optional(),
  predecessorId: Id.optional(),
  successorId: Id.optional(),
  /** Turns started (`count`) and where the latest stands. */
  turn: z.object({ state: TurnState, count: z.number().int().nonnegative() }).strict(),
  usage: z.object({ tokens: z.number().int().nonnegative() }).strict(),
}).strict();
export type Agent = z.infer<typeof Agent>;

export const AgentList = z.object({ agents: z.array(Agent) }).strict();
export type AgentList = z.infer<typeof AgentList>;

/** GET …/agents/:agentId/wait: the agent when the wait ended, and whether it ended by timing out. */
export const AgentWaited = z.object({ agent: Agent, timedOut: z.boolean() }).strict();
export type AgentWaited = z.infer<typeof AgentWaited>;

/* The runner side: what the gateway asks the runner holding the session about its processes. */

const ProbeTarget = { sessionId: Id, workspaceId: Id, placementGeneration: Generation };

/** Declared processes one check or resolve may name. */
export const MAX_PROBED_PROCESSES = MAX_AGENTS_PER_SESSION;

/** Which process a claimed pid is: found in exactly one of the session's pid namespaces (or the one named). */
export const FindProcessRequest = z.object({ ...ProbeTarget, pid: AgentPid, pidNamespace: z.number().int().min(1).optional() }).strict();
/** `seen` when found; otherwise how many of the session's processes had the pid (0: none; more: name the namespace). */
export const FindProcessReply = z.object({ seen: ProcessSeen.optional(), matches: z.number().int().nonnegative() }).strict();

/** Whether each of these processes is still the one that declared (same host pid, same start time, same namespace). */
export const CheckProcessesRequest = z.object({ ...ProbeTarget, processes: z.array(ProcessSeen).max(MAX_PROBED_PROCESSES) }).strict();
export const CheckProcessesReply = z.object({ alive: z.array(z.boolean()) }).strict();

/**
 * The nearest of `declared` among pid's ancestors (pid itself first), walking
 * only through processes of the session in pid's namespace.
 */
export const ResolveProcessRequest = z
  .object({ ...ProbeTarget, pid: AgentPid, pidNamespace: z.number().int().min(1).optional(), declared: z.array(ProcessSeen).max(MAX_PROBED_PROCESSES) })
  .strict();
/** `index` into `declared`; `matches` as FindProcessReply's (of the start pid). */
export const ResolveProcessReply = z.object({ index: z.number().int().nonnegative().optional(), matches: z.number().int().nonnegative() }).strict();

/** The requests a runner serves about its sessions' processes (under its own op subjects). */
export function agentProbeRpcs(poolId: string, runnerId: string) {
  return {
    find: { subject: runnerOpSubject(poolId, runnerId, "process-find"), request: FindProcessRequest, result: FindProcessReply },
    check: { subject: runnerOpSubject(poolId, runnerId, "process-check"), request: CheckProcessesRequest, result: CheckProcessesReply },
    resolve: { subject: runnerOpSubject(poolId, runnerId, "process-resolve"), request: ResolveProcessRequest, result: ResolveProcessReply },
  } satisfies Record<string, Rpc<z.ZodType, z.ZodType>>;
}
