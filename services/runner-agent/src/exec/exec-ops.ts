import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { serveRpc, type BusMetrics } from "@paddock/bus";
import { ConflictError, ExecCredit, execCreditSubject, type ExecCreditReply, execRpcs, type HeldSession } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { SessionExecs } from "./session-execs.ts";

/**
 * A held session as exec reaches it (a SessionRuntime is one): declared here
 * so that exec/ never imports sessions/.
 */
export interface HeldExecs {
  readonly held: HeldSession;
  /** Runs fn after every earlier command of the session, while it runs; refused otherwise. */
  execTask<T>(fn: (execs: SessionExecs) => Promise<T>): Promise<T>;
  /** The exec'd processes now; undefined before the session ran. */
  readonly execTable: SessionExecs | undefined;
}

export interface ExecOpsDeps {
  nc: NatsConnection;
  poolId: string;
  runnerId: string;
  /** A held session as it is now, for credit (no placement named: a credit for another one changes nothing). */
  session: (sessionId: string) => HeldExecs | undefined;
  /** The held session a request names, at its placement generation (conflict otherwise; unavailable while fenced). */
  held: (t: Target) => HeldExecs;
  /** The runner's errors as the public vocabulary (workspace-ops' translate). */
  translate: <T>(fn: () => Promise<T>) => Promise<T>;
  metrics: BusMetrics;
  log: Logger;
}

export interface Target {
  sessionId: string;
  workspaceId: string;
  placementGeneration: number;
}

/**
 * Serves exec for the sessions this runner holds: start, signal, stdin and
 * listing on request/reply, and readers' credit on a plain subject (a lost
 * credit is made good by the next one). Each request names the placement
 * generation it was made for; another one is a conflict, never acted on.
 */
export function serveExecOps(deps: ExecOpsDeps): Subscription[] {
  const rpcs = execRpcs(deps.poolId, deps.runnerId);
  const { held } = deps;
  const table = (t: Target): SessionExecs => {
    const execs = held(t).execTable;
    if (!execs) throw new ConflictError("session is not running");
    return execs;
  };
  const opts = { queue: `exec-${deps.runnerId}`, metrics: deps.metrics, log: deps.log };
  const { translate } = deps;
  const credits = deps.nc.subscribe(execCreditSubject(deps.poolId, deps.runnerId), {
    callback: (err, msg) => {
      if (err) return;
      let credit: ExecCredit;
      try {
        credit = ExecCredit.parse(msg.json());
      } catch {
        deps.metrics.invalidMessages.inc({ subject: execCreditSubject(deps.poolId, deps.runnerId) });
        if (msg.reply) msg.respond(JSON.stringify({ known: false } satisfies ExecCreditReply));
        return;
      }
      const known = deps.session(credit.sessionId)?.execTable?.credit(credit.execId, credit.bytes) ?? false;
      if (msg.reply) msg.respond(JSON.stringify({ known } satisfies ExecCreditReply));
    },
  });
  return [
    credits,
    serveRpc(
      deps.nc,
      rpcs.start,
      (req) =>
        translate(async () => {
          const proc = await held(req).execTask((execs) => execs.start(req));
          // Debug only: an agent may exec thousands of times; each is an audit event already.
          deps.log.debug({ sessionId: req.sessionId, execId: req.execId, attached: req.attached }, "exec started");
          // Waited for outside the session's task: the session's other commands go on meanwhile.
          const done = req.inlineWaitMs === undefined ? undefined : await proc.inlineDone(req.inlineWaitMs);
          return { execId: proc.id, startedAt: proc.startedAt, ...(done ? { done } : {}) };
        }),
      opts,
    ),
    serveRpc(deps.nc, rpcs.signal, (req) => translate(async () => ({ delivered: table(req).get(req.execId).signal(req.signal) })), opts),
    serveRpc(deps.nc, rpcs.input, (req) => translate(async () => ({ written: table(req).get(req.execId).write(Buffer.from(req.data, "base64"), req.eof) })), opts),
    serveRpc(deps.nc, rpcs.list, (req) => translate(async () => table(req).list()), opts),
  ];
}
