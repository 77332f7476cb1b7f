/**
 * Example orchestrator: fans out N one-shot child sessions, each running a
 * stand-in coding agent, waits for every agent's turns, collects each child's
 * diff and tokens, and releases the children — over the public HTTP API only.
 *
 *   node --import tsx examples/fan-out-agents.ts --url "$PADDOCK_URL" --token "$PADDOCK_TOKEN" --children 3 [--turns 2] [--parent ID]
 *
 * Each child's command is a bash script (STAND_IN) that behaves as an agent
 * harness would, using the session's own `$PADDOCK_TOKEN`, `$PADDOCK_URL` and
 * `$PADDOCK_SESSION_ID` (docs/api.md, the agents routes):
 *   1. declares itself: its pid and pid namespace (`readlink /proc/self/ns/pid`);
 *   2. runs `--turns` turns: each is a `start`, real work (a file written in
 *      its workspace and staged in git, so the session's diff shows it), and
 *      an `end` reporting as tokens the bytes it wrote;
 *   3. hands off once: parks itself and starts a successor process (SUCCESSOR,
 *      a second bash in the same app) that resumes the parked agent under its
 *      own pid, runs one more turn, and stays up, ready, until released.
 *
 * The orchestrator never polls. It follows each child's audit events
 * (`GET /v1/events?sessionId=…&follow=true`, NDJSON) to learn the agents' ids
 * as they declare and resume, and long-polls `GET …/agents/:id/wait` for the
 * first agent's last turn, then for its successor's. A child whose session
 * ends early (its script failed: one-shot sessions are destroyed when their
 * command exits) fails the run with its terminal's last lines.
 *
 * Every call goes through `@paddock/sdk` (a route of the HTTP contract each,
 * its JSON answer parsed by that route's schema; the events follow resumes
 * from its last `seq` if its connection drops).
 */
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { HttpApi, type Agent, type AuditEvent } from "@paddock/contracts";
import { Paddock } from "@paddock/sdk";

/** The stand-in agent: `bash -c STAND_IN stand-in SUCCESSOR TURNS` in a child session's workspace. */
export const STAND_IN = String.raw`set -euo pipefail
api() { # METHOD PATH [JSON]: a call on this session's API with its own token; a failed call fails the script
  local method=$1 path=$2
  shift 2
  if [ $# -gt 0 ]; then set -- --data "$1"; fi
  curl -sS --fail-with-body -X "$method" -H "authorization: Bearer $PADDOCK_TOKEN" -H "content-type: application/json" \
    "$PADDOCK_URL/v1/sessions/$PADDOCK_SESSION_ID$path" "$@"
}
idOf() { sed -n 's/.*[{,]"id":"\([^"]*\)".*/\1/p'; }
turn() { # AGENT N: start, write and stage a file, end reporting the bytes written as tokens
  api POST "/agents/$1/turns" '{"event":"start"}' >/dev/null
  mkdir -p notes
  local file="notes/$1-turn-$2.txt"
  { echo "agent $1, turn $2"; seq 1 $((20 * $2)); } >"$file"
  git add "$file"
  local tokens
  tokens=$(wc -c <"$file")
  echo "REPORTED agent=$1 turn=$2 tokens=$tokens"
  api POST "/agents/$1/turns" "{\"event\":\"end\",\"tokens\":$tokens}" >/dev/null
}
export -f api idOf turn
git init -q . && git -c user.name=stand-in -c user.email=stand-in@example.invalid commit -q --allow-empty -m base
NS=$(readlink /proc/self/ns/pid)
ME=$(api POST /agents "{\"pid\":$$,\"pidNamespace\":\"$NS\",\"runtime\":\"stand-in\",\"model\":\"stand-in-1\"}" | idOf)
echo "DECLARED $ME"
for n in $(seq 1 "$2"); do turn "$ME" "$n"; done
api POST "/agents/$ME/park" >/dev/null
echo "PARKED $ME"
bash -c "$1" successor "$ME" &
wait $!
`;

/** The successor: `bash -c SUCCESSOR successor PARKED_ID`, started by the parked agent (api and turn exported to it). */
export const SUCCESSOR = String.raw`set -euo pipefail
NS=$(readlink /proc/self/ns/pid)
ME=$(api POST "/agents/$1/resume" "{\"pid\":$$,\"pidNamespace\":\"$NS\",\"model\":\"stand-in-2\",\"handoffId\":\"handoff-of-$1\"}" | idOf)
echo "RESUMED $1 AS $ME"
turn "$ME" 1
echo "DONE $ME"
exec sleep infinity
`;

export interface FanOutOptions {
  url: string;
  token: string;
  children: number;
  /** Turns of each first agent before its handoff (its successor runs one more). */
  turns?: number;
  /** Make the children the children of this session (a session's own token does so by itself). */
  parentId?: string;
  /** How long one wait call may long-poll (the route's timeoutMs); a wait that times out is asked again. */
  waitMs?: number;
  /** Called with each child's result before it is released (to look at it while it still runs). */
  beforeRelease?: (child: ChildResult) => Promise<void>;
}

export interface ChildResult {
  sessionId: string;
  /** The lineage, first agent first: the parked one, then its successor. */
  agents: Agent[];
  /** Tokens reported over the whole lineage. */
  tokens: number;
  /** Files the children's diff shows changed, by repository path. */
  files: string[];
  /** The `git diff HEAD` of the child's workspace repository. */
  diff: string;
  /** The child's state once released. */
  releasedState: string;
}

export interface FanOutSummary {
  children: ChildResult[];
  tokens: number;
}

/** Actions after which a child's command no longer runs in its sandbox: its agents will take no more turns. */
const ENDED = new Set<string>(["exit", "fail", "cancel", "delete", "expire", "timeout", "suspend", "evict"]);

/**
 * One child's audit events, read in the background: `next(pred)` resolves
 * with the first event (seen or to come) that pred holds for, and rejects
 * once the session has ended without one.
 */
class ChildEvents {
  private readonly events: AuditEvent[] = [];
  private waiters: Array<() => void> = [];
  private failure: Error | undefined;
  private readonly abort = new AbortController();
  /** Aborted by close(): ends the stream and any call made with it. */
  readonly signal = this.abort.signal;

  constructor(pd: Paddock, readonly sessionId: string) {
    void (async () => {
      try {
        for await (const e of pd.events.follow({ sessionId, signal: this.signal })) {
          this.events.push(e);
          if (ENDED.has(e.action)) this.failure ??= new Error(`session ${sessionId} ended (${e.action}) before its agents were done`);
          this.wake();
        }
        this.failure ??= new Error(`the events stream of ${sessionId} closed`);
      } catch (err) {
        this.failure ??= err instanceof Error ? err : new Error(String(err));
      }
      this.wake();
    })();
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  async next(pred: (e: AuditEvent) => boolean): Promise<AuditEvent> {
    for (;;) {
      const found = this.events.find(pred);
      if (found) return found;
      if (this.failure) throw this.failure;
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  /** Resolves never; rejects once the session ended (or the stream failed). */
  async ended(): Promise<never> {
    for (;;) {
      if (this.failure) throw this.failure;
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  close(): void {
    this.failure ??= new Error("closed");
    this.abort.abort();
    this.wake();
  }
}

/** Long-polls the wait route until the agent's turn `turn` has ended (asking again when a wait times out). */
async function waitForTurn(pd: Paddock, sessionId: string, agentId: string, turn: number, waitMs: number, signal: AbortSignal): Promise<Agent> {
  for (;;) {
    signal.throwIfAborted();
    const waited = await pd.agents.wait(sessionId, agentId, { turn, timeoutMs: waitMs, signal });
    if (!waited.timedOut) return waited.agent;
  }
}

/** The files a `git diff` shows changed. */
export function filesOfDiff(diff: string): string[] {
  return [...diff.matchAll(/^\+\+\+ b\/(.+)$/gm)].map((m) => m[1] ?? "");
}

async function runChild(pd: Paddock, opts: Required<Pick<FanOutOptions, "turns" | "waitMs">> & FanOutOptions, sessionId: string): Promise<ChildResult> {
  const events = new ChildEvents(pd, sessionId);
  try {
    const work = (async () => {
      const declared = await events.next((e) => e.action === "agent.declare");
      const firstId = declared.agent?.id ?? "";
      // The first agent's last turn ended (it parks right after).
      await waitForTurn(pd, sessionId, firstId, opts.turns, opts.waitMs, events.signal);
      const resumed = await events.next((e) => e.action === "agent.resume" && e.agent?.id === firstId);
      const successorId = resumed.agent?.successorId ?? "";
      await waitForTurn(pd, sessionId, successorId, 1, opts.waitMs, events.signal);
      return { firstId, successorId };
    })();
    const { firstId, successorId } = await Promise.race([work, events.ended()]);
    const agents = await pd.agents.list(sessionId);
    const lineage: Agent[] = [];
    for (let a = agents.find((x) => x.id === firstId); a; a = agents.find((x) => x.id === a?.successorId)) lineage.push(a);
    if (lineage.at(-1)?.id !== successorId) throw new Error(`session ${sessionId}: the lineage of ${firstId} does not end at ${successorId}`);
    const { repos } = await pd.transport.call(HttpApi.readDiff, { params: { id: sessionId } });
    const diff = repos.map((r) => r.diff).join("");
    const result: ChildResult = {
      sessionId,
      agents: lineage,
      tokens: lineage.reduce((sum, a) => sum + a.usage.tokens, 0),
      files: filesOfDiff(diff),
      diff,
      releasedState: "",
    };
    await opts.beforeRelease?.(result);
    return result;
  } finally {
    events.close();
  }
}

/** The last lines of a child's terminal, for an error message. */
async function tail(pd: Paddock, sessionId: string): Promise<string> {
  const res = await pd.transport.send(HttpApi.readLog, { params: { id: sessionId } }, { accept: "application/octet-stream" });
  return (await res.text()).split(/\r?\n/).slice(-10).join("\n");
}

/** Runs the whole fan-out; the children are released whether it succeeds or fails. */
export async function fanOutAgents(options: FanOutOptions): Promise<FanOutSummary> {
  const opts = { turns: 2, waitMs: 60_000, ...options };
  const pd = new Paddock({ baseUrl: opts.url, token: opts.token });
  const cmd = ["bash", "-c", STAND_IN, "stand-in", SUCCESSOR, String(opts.turns)];
  const created = await Promise.allSettled(
    Array.from({ length: opts.children }, () =>
      // One-shot: should a stand-in fail, its session ends (destroyed) by itself; the lifetime bounds a lost orchestrator.
      pd.sessions.create({ spec: { cmd }, oneShot: true, maxLifetimeMs: 30 * 60_000, ...(opts.parentId !== undefined ? { parentId: opts.parentId } : {}) }),
    ),
  );
  const ids = created.flatMap((c) => (c.status === "fulfilled" ? [c.value.id] : []));
  const results = await Promise.allSettled(ids.map((id) => runChild(pd, opts, id)));
  // Release every child, done or not, waiting until each is destroyed (one that ended by itself already is).
  const released = await Promise.all(
    ids.map((id) =>
      pd.sessions
        .delete(id, { wait: "destroyed", timeoutMs: 60_000 })
        .catch(() => pd.sessions.get(id))
        .then((s) => s.state),
    ),
  );
  const failed = [...created, ...results].find((r) => r.status === "rejected");
  if (failed?.status === "rejected") {
    const which = results.findIndex((r) => r.status === "rejected");
    const log = which >= 0 ? `\n--- last lines of ${ids[which] ?? ""}:\n${await tail(pd, ids[which] ?? "")}` : "";
    throw new Error(`fan-out failed: ${String(failed.reason)}${log}`, { cause: failed.reason });
  }
  const children = results.map((r, i) => ({ ...(r as PromiseFulfilledResult<ChildResult>).value, releasedState: released[i] ?? "" }));
  return { children, tokens: children.reduce((sum, c) => sum + c.tokens, 0) };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      url: { type: "string", default: process.env.PADDOCK_URL ?? "http://127.0.0.1:8080" },
      token: { type: "string", default: process.env.PADDOCK_TOKEN },
      children: { type: "string", default: "3" },
      turns: { type: "string", default: "2" },
      parent: { type: "string" },
    },
  });
  const children = Number(values.children);
  const turns = Number(values.turns);
  if (!values.token) throw new Error("--token (or $PADDOCK_TOKEN) is required");
  if (!Number.isInteger(children) || children < 1 || children > 64) throw new Error("--children must be 1 to 64");
  if (!Number.isInteger(turns) || turns < 1 || turns > 20) throw new Error("--turns must be 1 to 20");
  const summary = await fanOutAgents({ url: values.url, token: values.token, children, turns, ...(values.parent !== undefined ? { parentId: values.parent } : {}) });
  // The diffs themselves are long: the summary names the files.
  const brief = {
    tokens: summary.tokens,
    children: summary.children.map(({ diff: _, agents, ...c }) => ({
      ...c,
      agents: agents.map((a) => ({ id: a.id, state: a.state, turns: a.turn.count, tokens: a.usage.tokens, predecessorId: a.predecessorId, successorId: a.successorId })),
    })),
  };
  process.stdout.write(JSON.stringify(brief, null, 2) + "\n");
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`fan-out-agents: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
