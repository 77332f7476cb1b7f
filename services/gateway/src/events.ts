import type { ServerResponse } from "node:http";
import { z } from "zod";
import { decodeJson } from "@paddock/bus";
import { AuditEvent, Id, Streams, Subjects, type Scope } from "@paddock/contracts";
import { Action } from "./auth.ts";
import { resolveApp, sessionResource, workspaceResource, type GatewayContext } from "./context.ts";
import { parseWith, queryObject, route, type Route } from "./http.ts";
import { QueryLimit } from "./sessions.ts";
import { exitCodeOf, lastSeqOf, placementGenerationOf, readRange } from "./termlog.ts";

const QuerySeq = z
  .string()
  .regex(/^\d{1,15}$/, "must be a stream sequence")
  .transform(Number)
  .default(0);

export const EventsQuery = z.object({ sessionId: Id.optional(), since: QuerySeq, limit: QueryLimit }).strict();
export const LogQuery = z.object({ app: Id.optional(), since: QuerySeq }).strict();

/** Response header of the log route: the cursor of the last chunk included (resume with ?since). */
export const LOG_CURSOR_HEADER = "paddock-cursor";

function drainOrClose(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off("drain", done);
      res.off("close", done);
      resolve();
    };
    res.once("drain", done);
    res.once("close", done);
  });
}

export function eventRoutes(ctx: GatewayContext): Route[] {
  const { log, metrics } = ctx.deps;

  const auditSubject = async (scope: Scope, sessionId: string | undefined): Promise<string> => {
    if (sessionId === undefined) {
      await ctx.authorizer.authorize(scope, Action.readEvents, workspaceResource(scope));
      return Subjects.auditWorkspace(scope.workspaceId);
    }
    const session = await ctx.getSession(scope, sessionId);
    await ctx.authorizer.authorize(scope, Action.readEvents, sessionResource(session));
    return Subjects.audit(scope.workspaceId, "session", session.id);
  };

  return [
    route("GET", "/v1/events", async ({ req, res, query }) => {
      const scope = await ctx.authenticate(req);
      const q = parseWith(EventsQuery, queryObject(query), "query");
      const subject = await auditSubject(scope, q.sessionId);
      const jsm = await ctx.jsm();
      const events: AuditEvent[] = [];
      let lastSeq = 0;
      let more = false;
      for await (const m of readRange(jsm, Streams.audit, subject, q.since + 1)) {
        if (events.length === q.limit) {
          more = true;
          break;
        }
        lastSeq = m.seq;
        const decoded = decodeJson(AuditEvent, m.data);
        if (!decoded.ok || decoded.value.workspaceId !== scope.workspaceId) {
          metrics.bus.invalidMessages.inc({ subject: Streams.audit });
          log.warn({ seq: m.seq, subject: m.subject }, "audit event skipped: breaks its contract");
          continue;
        }
        events.push(decoded.value);
      }
      const body = { events, ...(more ? { nextCursor: String(lastSeq) } : {}) };
      const text = JSON.stringify(body);
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text), "cache-control": "no-store" });
      res.end(text);
    }),

    route("GET", "/v1/sessions/:id/log", async ({ req, res, params, query }) => {
      const scope = await ctx.authenticate(req);
      const q = parseWith(LogQuery, queryObject(query), "query");
      const session = await ctx.getSession(scope, params.id);
      await ctx.authorizer.authorize(scope, Action.readLog, sessionResource(session));
      const app = resolveApp(session, q.app);
      const subject = Subjects.term(session.id, app);
      const jsm = await ctx.jsm();
      // The log as of now: every retained chunk after `since` up to the last one at this instant.
      const upTo = await lastSeqOf(jsm, Streams.term, subject);
      res.writeHead(200, {
        "content-type": "application/octet-stream",
        "cache-control": "no-store",
        [LOG_CURSOR_HEADER]: String(Math.max(upTo, q.since)),
      });
      if (upTo > q.since) {
        for await (const m of readRange(jsm, Streams.term, subject, q.since + 1, upTo)) {
          if (placementGenerationOf(m.header) < session.placementGeneration) {
            metrics.staleChunks.inc();
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
