import { HttpApi, type Member, WorkspaceRole } from "@paddock/contracts";
import { apiOf, commandGroup, parseCommand, positionals, type Command } from "../command.ts";
import { json, table } from "../format.ts";
import { ExitCode, UsageError, write } from "../io.ts";

/** `--workspace WS`: which workspace a member command is about (required: a token does not say which others its actor administers). */
function workspaceOf(cmd: string, value: string | undefined): string {
  if (value === undefined || value === "") throw new UsageError(`${cmd}: --workspace WS is required`);
  return value;
}

function membersTable(members: readonly Member[]): string {
  return table(
    ["ACTOR", "ROLE"],
    members.map((m) => [m.actorId, m.role]),
  );
}

export const workspaceCreateCommand: Command = {
  name: "workspace create",
  summary: "create a workspace (fleet operators)",
  help: `usage: paddock workspace create ID [--name NAME] [--json]

Creates a workspace (for fleet operators: admins of workspace 'fleet'). It has
no member until one is added: 'paddock member add ACTOR --workspace ID --role admin',
then 'paddock token create --for ACTOR --workspace ID' mints their token.
  --name NAME  a display name
  --json       print the created record
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { name: { type: "string" }, json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const made = await apiOf(ctx).call(HttpApi.createWorkspace, { body: { id, ...(args.flags.name !== undefined ? { name: args.flags.name } : {}) } });
    await write(ctx.io.stdout, args.flags.json ? json(made) : `${made.id}\n`);
    return ExitCode.ok;
  },
};

const lsSub: Command = {
  name: "member ls",
  summary: "list a workspace's members",
  help: `usage: paddock member ls --workspace WS [--json]

Lists the workspace's members and their roles (its admins, or a fleet operator).
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { workspace: { type: "string" }, json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    positionals(this, args.positionals, []);
    const ws = workspaceOf("paddock member ls", args.flags.workspace);
    const { members } = await apiOf(ctx).call(HttpApi.listMembers, { params: { ws } });
    await write(ctx.io.stdout, args.flags.json ? json(members) : membersTable(members));
    return ExitCode.ok;
  },
};

const addSub: Command = {
  name: "member add",
  summary: "add a member or change their role",
  help: `usage: paddock member add ACTOR --workspace WS [--role member|admin] [--json]

Adds ACTOR to the workspace (as a member unless --role admin), or changes their
role; the workspace's last admin cannot be demoted.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { workspace: { type: "string" }, role: { type: "string" }, json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [actorId = ""] = positionals(this, args.positionals, ["actor"]);
    const ws = workspaceOf("paddock member add", args.flags.workspace);
    const role = WorkspaceRole.safeParse(args.flags.role ?? "member");
    if (!role.success) throw new UsageError(`paddock member add: --role is member or admin, got ${JSON.stringify(args.flags.role)}`);
    const member = await apiOf(ctx).call(HttpApi.putMember, { params: { ws, actorId }, body: { role: role.data } });
    await write(ctx.io.stdout, args.flags.json ? json(member) : `${member.actorId} ${member.role}\n`);
    return ExitCode.ok;
  },
};

const rmSub: Command = {
  name: "member rm",
  summary: "remove a member",
  help: `usage: paddock member rm ACTOR --workspace WS [--json]

Removes ACTOR from the workspace: their open terminals and streams are cut at
once and their tokens stop authorizing there. The last admin cannot be removed.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { workspace: { type: "string" }, json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [actorId = ""] = positionals(this, args.positionals, ["actor"]);
    const ws = workspaceOf("paddock member rm", args.flags.workspace);
    const removed = await apiOf(ctx).call(HttpApi.removeMember, { params: { ws, actorId } });
    await write(ctx.io.stdout, args.flags.json ? json(removed) : `${removed.actorId}\n`);
    return ExitCode.ok;
  },
};

export const memberCommand: Command = commandGroup({
  name: "member",
  summary: "manage a workspace's members (ls, add, rm)",
  subcommands: [lsSub, addSub, rmSub],
});

export const workspaceCommand: Command = commandGroup({
  name: "workspace",
  summary: "manage workspaces (create)",
  subcommands: [workspaceCreateCommand],
});
