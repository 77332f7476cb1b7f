import { HttpApi } from "@paddock/contracts";
import { apiOf, commandGroup, parseCommand, positionals, type Command } from "../command.ts";
import { json, keyValues, runnersTable } from "../format.ts";
import { ExitCode, UsageError, write } from "../io.ts";

/** The contract route of each state change. */
const STATE_ROUTES = { drain: HttpApi.drainRunner, cordon: HttpApi.cordonRunner, uncordon: HttpApi.uncordonRunner } as const;

export const runnersCommand: Command = {
  name: "runners",
  summary: "list runners",
  help: `usage: paddock runners [--json]

Lists the runners of the fleet (every page): id, pool, state (active, draining,
cordoned; lost when its lease expired), used/total slots, capabilities and
when it was last seen.
  --json   print a JSON array of runner records
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    positionals(this, args.positionals, []);
    const runners = await apiOf(ctx).listAll(HttpApi.listRunners, (p) => p.runners);
    await write(ctx.io.stdout, args.flags.json ? json(runners) : runnersTable(runners));
    return ExitCode.ok;
  },
};

/** drain, cordon, uncordon: POST /v1/runners/ID/VERB, print "ID STATE" (the record with --json). */
function stateSub(verb: "drain" | "cordon" | "uncordon", summary: string, about: string): Command {
  return {
    name: `runner ${verb}`,
    summary,
    help: `usage: paddock runner ${verb} ID [--json]

${about}
Prints "ID STATE" (the runner record with --json). Needs a workspace admin.
  --json   print the runner record
`,
    async run(ctx, argv) {
      const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
      if (!args) return ExitCode.ok;
      const [id = ""] = positionals(this, args.positionals, ["id"]);
      const runner = await apiOf(ctx).call(STATE_ROUTES[verb], { params: { id }, body: {} });
      await write(ctx.io.stdout, args.flags.json ? json(runner) : `${runner.id} ${runner.state}\n`);
      return ExitCode.ok;
    },
  };
}

const drainSub = stateSub(
  "drain",
  "take no new sessions, move the ones held to other runners",
  "Drains the runner: it takes no new sessions, and the scheduler moves each running one to another runner of the pool (cold suspend, resume elsewhere from the checkpoint), a few at a time and only as free slots allow. Watch `paddock runner get ID` reach 0 used slots before stopping it.",
);
const cordonSub = stateSub("cordon", "take no new sessions", "Cordons the runner: it takes no new sessions; the ones it holds keep running.");
const uncordonSub = stateSub("uncordon", "make a runner active again", "Makes a drained or cordoned runner active: it takes new sessions again.");

const getSub: Command = {
  name: "runner get",
  summary: "show one runner",
  help: `usage: paddock runner get ID [--json]

Prints the runner record as key: value lines, or as JSON with --json.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const runner = await apiOf(ctx).call(HttpApi.getRunner, { params: { id } });
    await write(ctx.io.stdout, args.flags.json ? json(runner) : keyValues(runner));
    return ExitCode.ok;
  },
};

const joinTokenSub: Command = {
  name: "runner join-token",
  summary: "mint a one-time token a runner host joins with",
  help: `usage: paddock runner join-token --pool POOL [--ttl-ms N] [--json]

Mints a one-time join token for POOL (fleet operators) and prints it once.
On the runner host: paddock-runner join --gateway URL --token TOKEN
(deploy/runner/README.md). The token is spent by the first join, and expires
after --ttl-ms (default 1 hour, at most 7 days).
  --pool POOL   the pool the runner joins
  --ttl-ms N    lifetime of the token in milliseconds
  --json        print {token, poolId, expiresAt}
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { pool: { type: "string" }, "ttl-ms": { type: "int" }, json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    positionals(this, args.positionals, []);
    if (args.flags.pool === undefined) throw new UsageError("paddock runner join-token: --pool is required");
    const ttlMs = args.flags["ttl-ms"];
    const created = await apiOf(ctx).call(HttpApi.createJoinToken, { body: { poolId: args.flags.pool, ...(ttlMs !== undefined ? { ttlMs } : {}) } });
    await write(ctx.io.stdout, args.flags.json ? json(created) : `${created.token}\n`);
    return ExitCode.ok;
  },
};

const revokeSub: Command = {
  name: "runner revoke",
  summary: "cut a joined runner off: close its connections, move its sessions",
  help: `usage: paddock runner revoke ID [--json]

Revokes a joined runner (fleet operators): its NATS connections are closed, it
can no longer connect, and it is declared lost so its sessions resume
elsewhere from their last checkpoint. Prints "ID revoked N" (connections
closed; the answer with --json).
  --json   print {identity, connectionsClosed}
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const revoked = await apiOf(ctx).call(HttpApi.revokeRunner, { params: { id }, body: {} });
    await write(ctx.io.stdout, args.flags.json ? json(revoked) : `${revoked.identity.runnerId} revoked ${String(revoked.connectionsClosed)}\n`);
    return ExitCode.ok;
  },
};

const subcommands: readonly Command[] = [drainSub, cordonSub, uncordonSub, getSub, joinTokenSub, revokeSub];

export const runnerCommand: Command = commandGroup({
  name: "runner",
  summary: "administer one runner (drain, cordon, uncordon, get, join-token, revoke)",
  subcommands,
  usage: "paddock runner SUBCOMMAND ID [--json]",
  footer: "Run 'paddock runner SUBCOMMAND --help' for its flags; 'paddock runners' lists them.",
});
