import { AuditEntry, describeZodError, HttpApi } from "@paddock/contracts";
import { apiOf, parseCommand, positionals, type Command } from "../command.ts";
import { eventLine, EVENT_LINE_HEADER, eventsTable, json, keyValues, sessionsTable } from "../format.ts";
import { ApiError, ExitCode, write } from "../io.ts";


export const lsCommand: Command = {
  name: "ls",
  summary: "list sessions",
  help: `usage: paddock ls [--all] [--parent ID] [--creator ID] [--limit N] [--json]

Lists the workspace's live sessions (every page). With a session's own token,
only the sessions that token created.
  --all          include ended sessions (canceled, failed, dead, destroyed)
  --parent ID    only the children of session ID
  --creator ID   only the sessions actor ID created (a session's id for the
                 ones its token created)
  --limit N      list at most N sessions
  --json         print a JSON array of session records
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, {
      all: { type: "boolean" },
      parent: { type: "string" },
      creator: { type: "string" },
      limit: { type: "int" },
      json: { type: "boolean" },
    });
    if (!args) return ExitCode.ok;
    positionals(this, args.positionals, []);
    // The ids go as given: the gateway refuses a malformed one (invalid, exit 1).
    const sessions = await apiOf(ctx).listAll(HttpApi.listSessions, (p) => p.sessions, {
      query: { includeTerminal: args.flags.all === true, parentId: args.flags.parent, creatorId: args.flags.creator },
      max: args.flags.limit,
    });
    await write(ctx.io.stdout, args.flags.json ? json(sessions) : sessionsTable(sessions));
    return ExitCode.ok;
  },
};

export const getCommand: Command = {
  name: "get",
  summary: "show one session",
  help: `usage: paddock get ID [--json]

Prints the session record as key: value lines, or as JSON with --json.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const session = await apiOf(ctx).call(HttpApi.getSession, { params: { id } });
    await write(ctx.io.stdout, args.flags.json ? json(session) : keyValues(session));
    return ExitCode.ok;
  },
};

export const rmCommand: Command = {
  name: "rm",
  summary: "cancel or destroy sessions",
  help: `usage: paddock rm ID...

Deletes each session (cancels one not yet running, destroys a later one) and
prints the id of each one deleted. Exits 1 if any deletion failed.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, {});
    if (!args) return ExitCode.ok;
    const ids = positionals(this, args.positionals, ["id"], true);
    const api = apiOf(ctx);
    let code: number = ExitCode.ok;
    for (const id of ids) {
      try {
        const res = await api.open(HttpApi.deleteSession, { params: { id } });
        await res.body?.cancel();
        await write(ctx.io.stdout, `${id}\n`);
      } catch (err) {
        if (!(err instanceof ApiError)) throw err;
        ctx.io.stderr.write(`error: ${err.code}: ${id}: ${err.message}\n`);
        code = ExitCode.failure;
      }
    }
    return code;
  },
};

export const eventsCommand: Command = {
  name: "events",
  summary: "list or follow audit events",
  help: `usage: paddock events [--session ID] [--follow] [--json]

Lists the workspace's audit events (every page), optionally of one session.
  --session ID   only the events of session ID
  -f, --follow   after the existing events, keep printing new ones as they
                 are recorded, until interrupted (Ctrl-C)
  --json         print a JSON array; with --follow, one JSON event per line
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, {
      session: { type: "string" },
      follow: { type: "boolean", short: "f" },
      json: { type: "boolean" },
    });
    if (!args) return ExitCode.ok;
    positionals(this, args.positionals, []);
    if (args.flags.follow) return followEvents(ctx, args.flags.session, args.flags.json === true);
    const events = await apiOf(ctx).listAll(HttpApi.listEvents, (p) => p.events, {
      query: { sessionId: args.flags.session },
      cursorParam: "since",
    });
    await write(ctx.io.stdout, args.flags.json ? json(events) : eventsTable(events));
    return ExitCode.ok;
  },
};

/**
 * Prints the NDJSON stream of GET /v1/events?follow=true line by line. It
 * only ends when the gateway closes it (a restart): that is reported and
 * exits 1, since events may follow that this run did not print.
 */
async function followEvents(ctx: Parameters<Command["run"]>[0], sessionId: string | undefined, asJson: boolean): Promise<number> {
  const res = await apiOf(ctx).open(HttpApi.listEvents, { query: { sessionId, follow: true } });
  if (!res.body) throw new ApiError("internal", "GET /v1/events: the gateway answered without a body");
  if (!asJson) await write(ctx.io.stdout, EVENT_LINE_HEADER);
  const decoder = new TextDecoder();
  let buf = "";
  const emit = async (line: string) => {
    if (line.trim() === "") return;
    let data: unknown;
    try {
      data = JSON.parse(line);
    } catch {
      throw new ApiError("internal", "GET /v1/events: the stream carried a line that is not JSON");
    }
    const parsed = AuditEntry.safeParse(data);
    if (!parsed.success) throw new ApiError("internal", `GET /v1/events: unexpected event: ${describeZodError(parsed.error)}`);
    await write(ctx.io.stdout, asJson ? JSON.stringify(parsed.data) + "\n" : eventLine(parsed.data));
  };
  try {
    for await (const chunk of res.body) {
      buf += decoder.decode(chunk as Uint8Array, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) !== -1) {
        await emit(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
    }
  } catch (err) {
    if (err instanceof ApiError) throw err;
    throw new ApiError("unavailable", "the connection to the gateway was lost while following events");
  }
  await emit(buf);
  throw new ApiError("unavailable", "the gateway closed the event stream");
}
