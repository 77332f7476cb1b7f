import { CreateSessionBody, describeZodError, HttpApi, type AttachMode, type Session } from "@paddock/contracts";
import { TerminalAttachment, type AttachOutcome, type Since } from "../attach.ts";
import { apiOf, notice, parseCommand, positionals, type Command, type Ctx } from "../command.ts";
import type { ApiClient } from "../http.ts";
import { ExitCode, UsageError, write } from "../io.ts";
import { bindInput } from "../terminal.ts";

const DETACH_HINT = "Ctrl-] detaches and leaves the session running.";

export const runCommand: Command = {
  name: "run",
  summary: "create a session running CMD and attach to it",
  help: `usage: paddock run [--name NAME] [--view] [-d] -- CMD [ARG...]

Creates a session whose main app runs CMD, attaches to its terminal from the
start of its log, and exits with CMD's exit code.

  --name NAME   a name for the session
  --view        attach read-only (viewer) instead of as the controller
  -d, --detach  print the session id and exit without attaching

When stdin is a terminal it is put in raw mode; ${DETACH_HINT}
Otherwise stdin is forwarded to CMD as it arrives.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { name: { type: "string" }, view: { type: "boolean" }, detach: { type: "boolean", short: "d" } }, { commandAtFirstPositional: true });
    if (!args) return ExitCode.ok;
    const cmd = args.rest ?? [];
    if (cmd.length === 0) throw new UsageError("paddock run: no command given (usage: paddock run [--name NAME] -- CMD [ARG...])");
    const body = CreateSessionBody.safeParse({ name: args.flags.name, spec: { cmd } });
    if (!body.success) throw new UsageError(`paddock run: ${describeZodError(body.error)}`);
    const api = apiOf(ctx);
    const session = await api.call(HttpApi.createSession, { body: body.data });
    if (args.flags.detach) {
      await write(ctx.io.stdout, `${session.id}\n`);
      return ExitCode.ok;
    }
    if (ctx.io.stdin.isTTY) notice(ctx, `session ${session.id}; ${DETACH_HINT}`);
    return attachAndReport(ctx, api, session.id, { mode: args.flags.view ? "viewer" : "controller", since: "all" });
  },
};

export const attachCommand: Command = {
  name: "attach",
  summary: "attach to a session's terminal",
  help: `usage: paddock attach ID [--view] [--app APP] [--since all|screen|CURSOR]

Attaches to the terminal of app APP (default: the session's main app) as the
controller, or read-only with --view. Starts from the current screen (default),
the whole log (--since all) or after a cursor. On a lost connection it
reconnects from the last cursor it printed, so no output is lost or repeated.
Exits with the app's exit code when it ends; exits 1 when another controller
takes over. On a terminal, stdin is in raw mode and ${DETACH_HINT}
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { view: { type: "boolean" }, app: { type: "string" }, since: { type: "string" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const since = parseSince(args.flags.since ?? "screen");
    return attachAndReport(ctx, apiOf(ctx), id, { mode: args.flags.view ? "viewer" : "controller", since, app: args.flags.app });
  },
};

export const logsCommand: Command = {
  name: "logs",
  summary: "print a session's terminal log",
  help: `usage: paddock logs ID [--app APP] [-f]

Prints the terminal log of app APP (default: the main app) as raw bytes.
  -f, --follow   keep printing live output until the app exits
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { app: { type: "string" }, follow: { type: "boolean", short: "f" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const api = apiOf(ctx);
    if (args.flags.follow) {
      const att = new TerminalAttachment({
        client: api,
        sessionId: id,
        app: args.flags.app,
        mode: "viewer",
        since: "all",
        output: (bytes) => ctx.io.stdout.write(bytes),
        notice: (text) => notice(ctx, text),
      });
      await att.done;
      return ExitCode.ok;
    }
    const res = await api.open(HttpApi.readLog, { params: { id }, query: { app: args.flags.app } });
    if (res.body) for await (const chunk of res.body) await write(ctx.io.stdout, chunk);
    return ExitCode.ok;
  },
};

interface AttachSpec {
  readonly mode: AttachMode;
  readonly since: Since;
  readonly app?: string | undefined;
}

/** Attaches with stdin bound, and turns the outcome into an exit code and a message. */
async function attachAndReport(ctx: Ctx, api: ApiClient, sessionId: string, spec: AttachSpec): Promise<number> {
  let raw = false;
  const att = new TerminalAttachment({
    client: api,
    sessionId,
    app: spec.app,
    mode: spec.mode,
    since: spec.since,
    output: (bytes) => ctx.io.stdout.write(bytes),
    notice: (text) => notice(ctx, text, raw),
  });
  const input = bindInput(ctx.io, att, spec.mode);
  raw = input.raw;
  let outcome: AttachOutcome;
  try {
    outcome = await att.done;
  } finally {
    input.release();
  }
  return report(ctx, api, sessionId, outcome, raw);
}

async function report(ctx: Ctx, api: ApiClient, sessionId: string, outcome: AttachOutcome, raw: boolean): Promise<number> {
  switch (outcome.kind) {
    case "exit":
      if (outcome.code !== null) return outcome.code;
      notice(ctx, `app ${outcome.app} was killed by a signal`, raw);
      return ExitCode.failure;
    case "detached":
      notice(ctx, `detached; the session keeps running. Re-attach with: paddock attach ${sessionId}`, raw);
      return ExitCode.ok;
    case "superseded":
      notice(ctx, "another controller attached to this terminal; this one was disconnected", raw);
      return ExitCode.failure;
    case "ended":
      return endedWithoutExit(ctx, await api.call(HttpApi.getSession, { params: { id: sessionId } }), outcome.reason);
  }
}

/** The terminal closed without an exit frame: the record says why. */
function endedWithoutExit(ctx: Ctx, session: Session, reason: string): number {
  if (session.state === "dead" && session.childExitCode !== null) return session.childExitCode;
  const why = session.error ? `: ${session.error}` : "";
  ctx.io.stderr.write(`error: session ${session.id} is ${session.state}${why} (terminal closed: ${reason})\n`);
  return ExitCode.failure;
}

function parseSince(value: string): Since {
  if (value === "all" || value === "screen") return value;
  if (/^\d{1,15}$/.test(value)) return Number(value);
  throw new UsageError(`paddock attach: --since must be all, screen or a cursor, got ${JSON.stringify(value)}`);
}
