import type { ServerResponse } from "node:http";
import { DeliverPolicy, jetstream, type ConsumerMessages, type JetStreamManager, type OrderedConsumerOptions } from "@nats-io/jetstream";
import { decodeJson, isDirectGetEmpty, PULL_OPTIONS } from "@paddock/bus";
import { AuditEvent, HttpApi, type AuditEntry, type ResourceKind, LOG_CURSOR_HEADER, NDJSON, NotFoundError, PaddockError, Streams, Subjects, type Scope } from "@paddock/contracts";
import { Action, type Principal } from "../auth/auth.ts";
import { resolveApp, sessionResource, workspaceResource, type GatewayContext } from "../context.ts";
import { drainOrClose, type Route } from "../http/http.ts";
import type { Reauthorize, StreamGuard } from "../auth/revocation.ts";
import { ChunkVerdict, exitCodeOf, judgeChunk, lastSeqOf, readRange } from "../terminal/termlog.ts";

/** Where a read of the audit stream starts: after a sequence, at a time, or (a follow) at what comes next. */
interface EventsStart {
  readonly since: number | "now";
  readonly startTime?: number | undefined;
}

function deliverFrom(start: EventsStart): Partial<OrderedConsumerOptions> {
  if (start.since === "now") return { deliver_policy: DeliverPolicy.New };
  if (start.startTime !== undefined) return { deliver_policy: DeliverPolicy.StartTime, opt_start_time: new Date(start.startTime).toISOString() };
  return start.since > 0 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: start.since + 1 } : { deliver_policy: DeliverPolicy.All };
}

/** The sequence of the subject's first event stored at or after `time`; past the end when there is none. */
async function firstSeqAt(jsm: JetStreamManager, subject: string, time: number): Promise<number> {
  try {
    for await (const m of await jsm.direct.getBatch(Streams.audit, { start_time: new Date(time), batch: 1, next_by_subj: subject })) return m.seq;
  } catch (err) {
    if (!isDirectGetEmpty(err)) throw err;
  }
  return Number.MAX_SAFE_INTEGER;
}

/** Stored messages one page read looks at, at most: a selective filter answers a shorter page and its cursor. */
export const EVENTS_SCAN_MAX = 10_000;
/** How far an event's stored time may trail its own `at` (the recorder publishes after the commit): an endTime read stops this far past it. */
const STORED_AFTER_AT_MS = 60_000;

/** The filters of a read beyond its subject (EventsQuery's action and actorId, and endTime on pages). */
interface EventsFilter {
  readonly action?: readonly string[] | undefined;
  readonly actorId?: string | undefined;
  readonly endTime?: number | undefined;
}

function matches(f: EventsFilter, e: AuditEntry): boolean {
  return (f.action === undefined || f.action.includes(e.action)) && (f.actorId === undefined || e.actorId === f.actorId) && (f.endTime === undefined || e.at <= f.endTime);
}

/** undefined for a session that is not there (its record is gone); any other error goes on. */
function unlessGone(err: unknown): undefined {
  if (err instanceof PaddockError && err.code === "not_found") return undefined;
  throw err;
}

export function eventRoutes(ctx: GatewayContext, guard: StreamGuard): Route[] {
  const { log, metrics } = ctx.deps;

  /** The audit subject the caller may read, and how to re-check that it still may (a followed stream). */
  const auditSubject = async (scope: Scope, sessionId: string | undefined, kind?: ResourceKind): Promise<{ subject: string; reauthorize: Reauthorize }> => {
    if (sessionId === undefined) {
      const reauthorize: Reauthorize = (s) => ctx.authorizer.authorize(s, Action.readEvents, workspaceResource(s));
      await reauthorize(scope);
      return { subject: kind === undefined ? Subjects.auditWorkspace(scope.workspaceId) : Subjects.audit(scope.workspaceId, kind, ">"), reauthorize };
    }
    const session = await ctx.getSession(scope, sessionId).catch(unlessGone);
    if (session === undefined) return endedSessionSubject(scope, sessionId);
    const reauthorize: Reauthorize = (s) => ctx.authorizer.authorize(s, Action.readEvents, sessionResource(session));
    await reauthorize(scope);
    return { subject: Subjects.audit(scope.workspaceId, "session", session.id), reauthorize };
  };

  /**
   * A session whose record expired or was evicted keeps its events (AUDIT
   * outlives records): they are read with the right that reads every event of
   * the workspace, which includes them. A caller without it, and an id with
   * no events in the caller's workspace, get the same not_found as any
   * absent session.
   */
  const endedSessionSubject = async (scope: Scope, sessionId: string): Promise<{ subject: string; reauthorize: Reauthorize }> => {
    const reauthorize: Reauthorize = (s) => ctx.authorizer.authorize(s, Action.readEvents, workspaceResource(s));
    try {
      await reauthorize(scope);
    } catch (err) {
      throw new NotFoundError("session", { cause: err });
    }
    const subject = Subjects.audit(scope.workspaceId, "session", sessionId);
    if ((await lastSeqOf(await ctx.jsm(), Streams.audit, subject)) === 0) throw new NotFoundError("session");
    return { subject, reauthorize };
  };

  /** The event with its stream sequence (the client's cursor); undefined for one that breaks its contract. */
  const decodeEvent = (scope: Scope, m: { seq: number; subject: string; data: Uint8Array }): AuditEntry | undefined => {
    const decoded = decodeJson(AuditEvent, m.data);
    if (!decoded.ok || decoded.value.workspaceId !== scope.workspaceId) {
      metrics.bus.invalidMessages.inc({ subject: Streams.audit });
      log.warn({ seq: m.seq, subject: m.subject }, "audit event skipped: breaks its contract");
      return undefined;
    }
    return { ...decoded.value, seq: m.seq };
  };

  /**
   * Streams the caller's events after `since` and then live, as NDJSON, until
   * the client disconnects (or the gateway stops): an ordered consumer on
   * AUDIT filtered to the subject the visibility check allowed. Everything
   * that can fail with a typed error (auth, query, consumer creation) has
   * happened before the 200 is written.
   */
  const followEvents = async (principal: Principal, allowed: { subject: string; reauthorize: Reauthorize }, start: EventsStart & EventsFilter, res: ServerResponse): Promise<void> => {
    const { scope } = principal;
    const consumer = await jetstream(ctx.deps.nc).consumers.get(Streams.audit, { filter_subjects: [allowed.subject], ...deliverFrom(start) });
    await guard.ready();
    const messages: ConsumerMessages = await consumer.consume(PULL_OPTIONS);
    const stop = () => void messages.close();
    // A client gone before this point closed before anyone listened: stop now, or the loop below waits for a message forever.
    if (res.destroyed || res.closed) stop();
    res.once("close", stop);
    // Revoked token, removed member: the stream is cut (not ended: the client must not take it as complete).
    const stream = { tokenHash: principal.tokenHash, revoke: () => res.destroy() };
    guard.add(stream, principal, allowed.reauthorize);
    try {
      res.writeHead(200, { "content-type": NDJSON, "cache-control": "no-store", "x-content-type-options": "nosniff" });
      res.flushHeaders();
      for await (const m of messages) {
        if (res.destroyed) break;
        const event = decodeEvent(scope, m);
        if (!event || !matches(start, event)) continue;
        if (!res.write(JSON.stringify(event) + "\n")) await drainOrClose(res);
      }
    } finally {
      guard.remove(stream);
      res.off("close", stop);
      await messages.close();
      if (!res.destroyed) res.end();
    }
  };

  return [
    ctx.serve(HttpApi.listEvents, async ({ caller: principal, query: q, res }) => {
      const { scope } = principal;
      const { subject, reauthorize } = await auditSubject(scope, q.sessionId, q.resourceKind);
      if (q.follow) {
        await followEvents(principal, { subject, reauthorize }, q, res);
        return;
      }
      const jsm = await ctx.jsm();
      const events: AuditEntry[] = [];
      let lastSeq = 0;
      let more = false;
      const from = q.startTime !== undefined ? await firstSeqAt(jsm, subject, q.startTime) : Number(q.since) + 1;
      let scanned = 0;
      for await (const m of readRange(jsm, Streams.audit, subject, from)) {
        // Stored well after endTime: nothing at or before it comes later (the page is the last).
        if (q.endTime !== undefined && m.time.getTime() > q.endTime + STORED_AFTER_AT_MS) break;
        if (events.length === q.limit || scanned === EVENTS_SCAN_MAX) {
          more = true;
          break;
        }
        scanned += 1;
        lastSeq = m.seq;
        const event = decodeEvent(scope, m);
        if (event && matches(q, event)) events.push(event);
      }
      return { status: 200, body: { events, ...(more ? { nextCursor: String(lastSeq) } : {}) } };
    }),

    ctx.serve(HttpApi.readLog, async ({ caller: { scope }, params, query: q, res }) => {
      const session = await ctx.getSession(scope, params.id);
      await ctx.authorizer.authorize(scope, Action.readLog, sessionResource(session));
      const app = resolveApp(session, q.app);
      const filter = Subjects.termOfApp(session.id, app);
      const jsm = await ctx.jsm();
      // The log as of now: every retained chunk after `since` up to the last one at this instant.
      const upTo = await lastSeqOf(jsm, Streams.term, filter);
      res.writeHead(200, {
        "content-type": "application/octet-stream",
        "cache-control": "no-store",
        [LOG_CURSOR_HEADER]: String(Math.max(upTo, q.since)),
      });
      if (upTo > q.since) {
        for await (const m of readRange(jsm, Streams.term, filter, q.since + 1, upTo)) {
          // The record read above is the placement as of this request: later generations are not in this log yet.
          const verdict = judgeChunk(m.subject, m.header, session);
          if (verdict !== ChunkVerdict.live) {
            if (verdict !== ChunkVerdict.ahead) metrics.droppedChunks.inc({ reason: verdict });
            continue;
          }
          if (exitCodeOf(m.header) !== undefined) break;
          if (!res.write(m.data)) await drainOrClose(res);
          if (res.destroyed) return;
        }
      }
      res.end();
    }),
  ];
}
