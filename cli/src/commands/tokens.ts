import { HttpApi, MAX_TOKEN_LIFETIME_MS, type TokenInfo } from "@paddock/contracts";
import { apiOf, commandGroup, parseCommand, positionals, type Command } from "../command.ts";
import { json, table, time } from "../format.ts";
import { ExitCode, UsageError, write } from "../io.ts";

const UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `90s`, `30m`, `1h`, `7d` → ms; a UsageError otherwise. */
export function parseDuration(cmd: string, text: string): number {
  const m = /^(\d{1,6})([smhd])$/.exec(text);
  const ms = m ? Number(m[1]) * (UNITS[m[2] ?? ""] ?? 0) : 0;
  if (!m || ms < 1000 || ms > MAX_TOKEN_LIFETIME_MS) {
    throw new UsageError(`${cmd}: --expires wants a duration like 90s, 30m, 1h or 7d (1 s to 366 d), got ${JSON.stringify(text)}`);
  }
  return ms;
}

function tokensTable(tokens: readonly TokenInfo[]): string {
  return table(
    ["ID", "LABEL", "CREATED", "EXPIRES"],
    tokens.map((t) => [t.id, t.label ?? "-", time(t.createdAt), t.expiresAt !== undefined ? time(t.expiresAt) : "never"]),
  );
}

const createSub: Command = {
  name: "token create",
  summary: "mint an API token",
  help: `usage: paddock token create [--label L] [--expires DURATION] [--for ACTOR --workspace WS] [--json]

Mints a token for you in your workspace and prints it: it is shown only this
once (the gateway keeps only its hash). --expires takes 90s, 30m, 1h or 7d; a
token cannot outlive the one that creates it. With --for, mints one for that
member of workspace WS instead (its admins, or a fleet operator).
  --label L           a label shown by 'paddock token ls'
  --expires DURATION  the token stops working after this long (default: never)
  --for ACTOR         mint for this member (needs --workspace)
  --workspace WS      the member's workspace
  --json              print the whole answer (token, id, label, createdAt, expiresAt)
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { label: { type: "string" }, expires: { type: "string" }, for: { type: "string" }, workspace: { type: "string" }, json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    positionals(this, args.positionals, []);
    const body: { label?: string; expiresInMs?: number } = {};
    if (args.flags.label !== undefined) body.label = args.flags.label;
    if (args.flags.expires !== undefined) body.expiresInMs = parseDuration("paddock token create", args.flags.expires);
    const forActor = args.flags.for;
    const ws = args.flags.workspace;
    if ((forActor === undefined) !== (ws === undefined)) throw new UsageError("paddock token create: --for ACTOR and --workspace WS go together");
    const created =
      forActor !== undefined && ws !== undefined
        ? await apiOf(ctx).call(HttpApi.createMemberToken, { params: { ws, actorId: forActor }, body })
        : await apiOf(ctx).call(HttpApi.createToken, { body });
    await write(ctx.io.stdout, args.flags.json ? json(created) : `${created.token}\n`);
    if (!args.flags.json) ctx.io.stderr.write(`[paddock] token ${created.id}: store it now, it is not shown again\n`);
    return ExitCode.ok;
  },
};

const lsSub: Command = {
  name: "token ls",
  summary: "list your tokens",
  help: `usage: paddock token ls [--json]

Lists your tokens in this workspace (never their values).
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    positionals(this, args.positionals, []);
    const { tokens } = await apiOf(ctx).call(HttpApi.listTokens);
    await write(ctx.io.stdout, args.flags.json ? json(tokens) : tokensTable(tokens));
    return ExitCode.ok;
  },
};

const revokeSub: Command = {
  name: "token revoke",
  summary: "revoke a token",
  help: `usage: paddock token revoke ID [--json]

Revokes a token (yours, or any in the workspace for an admin): it fails at once,
and terminals opened with it are closed. Prints the id.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const revoked = await apiOf(ctx).call(HttpApi.revokeToken, { params: { id } });
    await write(ctx.io.stdout, args.flags.json ? json(revoked) : `${revoked.id}\n`);
    return ExitCode.ok;
  },
};

const subcommands: readonly Command[] = [createSub, lsSub, revokeSub];

export const tokenCommand: Command = commandGroup({
  name: "token",
  summary: "manage API tokens (create, ls, revoke)",
  subcommands,
});
