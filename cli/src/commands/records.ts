import { Api } from "@paddock/contracts";
import { apiOf, EventList, parseCommand, positionals, SessionAnswer, type Command } from "../command.ts";
import { eventsTable, json, keyValues, sessionsTable } from "../format.ts";
import { ApiError, ExitCode, write } from "../io.ts";

const sessionPath = (id: string) => `/v1/sessions/${encodeURIComponent(id)}`;

export const lsCommand: Command = {
  name: "ls",
  summary: "list sessions",
  help: `usage: paddock ls [--all] [--limit N] [--json]

Lists the workspace's live sessions (every page).
  --all       include ended sessions (canceled, failed, dead, destroyed)
  --limit N   list at most N sessions
  --json      print a JSON array of session records
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { all: { type: "boolean" }, limit: { type: "int" }, json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    positionals(this, args.positionals, []);
    const sessions = await apiOf(ctx).listAll(
      "/v1/sessions",
      Api.listSessions.result,
      (p) => p.sessions,
      { query: { includeTerminal: args.flags.all === true }, max: args.flags.limit },
    );
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
    const session = await apiOf(ctx).json("GET", sessionPath(id), SessionAnswer);
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
        const res = await api.raw("DELETE", sessionPath(id));
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
  summary: "list audit events",
  help: `usage: paddock events [--session ID] [--json]

Lists the workspace's audit events (every page), optionally of one session.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { session: { type: "string" }, json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    positionals(this, args.positionals, []);
    const events = await apiOf(ctx).listAll("/v1/events", EventList, (p) => p.events, {
      query: { sessionId: args.flags.session },
      cursorParam: "since",
    });
    await write(ctx.io.stdout, args.flags.json ? json(events) : eventsTable(events));
    return ExitCode.ok;
  },
};
