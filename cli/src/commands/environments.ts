import { readFile } from "node:fs/promises";
import { CreateEnvironmentBody, describeZodError, HttpApi, UpdateEnvironmentBody } from "@paddock/contracts";
import type { FlagValues } from "../args.ts";
import { apiOf, commandGroup, parseCommand, positionals, type Command } from "../command.ts";
import { environmentsTable, json, keyValues } from "../format.ts";
import { ApiError, ExitCode, UsageError, write } from "../io.ts";


const fieldFlags = {
  name: { type: "string" },
  image: { type: "string" },
  setup: { type: "string" },
  "setup-file": { type: "string" },
  init: { type: "string" },
  egress: { type: "list" },
  secret: { type: "list" },
  json: { type: "boolean" },
} as const;

const clearFlags = {
  "clear-image": { type: "boolean" },
  "clear-setup": { type: "boolean" },
  "clear-init": { type: "boolean" },
  "clear-egress": { type: "boolean" },
  "clear-secrets": { type: "boolean" },
} as const;

const FIELD_HELP = `  --name N            the environment's name
  --image I           the image sessions start from
  --setup S           setup script, run once to build the environment
  --setup-file F      read the setup script from file F (instead of --setup)
  --init S            per-boot script, run after setup on every boot
  --egress HOST       a host sessions may reach (repeat for several)
  --secret NAME       a secret sessions get as $NAME (repeat for several)
  --json              print the environment record`;

/** The fields given on the command line, as a request body (absent flags stay absent). */
async function fieldsOf(cmd: string, flags: FlagValues<typeof fieldFlags>): Promise<Record<string, unknown>> {
  if (flags.setup !== undefined && flags["setup-file"] !== undefined) {
    throw new UsageError(`${cmd}: give --setup or --setup-file, not both`);
  }
  let setup = flags.setup;
  const file = flags["setup-file"];
  if (file !== undefined) {
    try {
      setup = await readFile(file, "utf8");
    } catch (err) {
      throw new UsageError(`${cmd}: cannot read --setup-file ${JSON.stringify(file)}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  const out: Record<string, unknown> = { name: flags.name, image: flags.image, setup, init: flags.init, egressAllow: flags.egress, secretRefs: flags.secret };
  for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k];
  return out;
}

const createSub: Command = {
  name: "env create",
  summary: "create an environment",
  help: `usage: paddock env create --name N [--image I] [--setup S | --setup-file F] [--init S]
                          [--egress HOST]... [--secret NAME]... [--json]

Creates an environment and prints its id (the record with --json).
${FIELD_HELP}
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, fieldFlags);
    if (!args) return ExitCode.ok;
    positionals(this, args.positionals, []);
    if (args.flags.name === undefined) throw new UsageError("paddock env create: --name is required");
    const body = CreateEnvironmentBody.safeParse(await fieldsOf("paddock env create", args.flags));
    if (!body.success) throw new UsageError(`paddock env create: ${describeZodError(body.error)}`);
    const env = await apiOf(ctx).call(HttpApi.createEnvironment, { body: body.data });
    await write(ctx.io.stdout, args.flags.json ? json(env) : `${env.id}\n`);
    return ExitCode.ok;
  },
};

const lsSub: Command = {
  name: "env ls",
  summary: "list environments",
  help: `usage: paddock env ls [--json]

Lists the workspace's environments (every page).
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    positionals(this, args.positionals, []);
    const envs = await apiOf(ctx).listAll(HttpApi.listEnvironments, (p) => p.environments);
    await write(ctx.io.stdout, args.flags.json ? json(envs) : environmentsTable(envs));
    return ExitCode.ok;
  },
};

const getSub: Command = {
  name: "env get",
  summary: "show one environment",
  help: `usage: paddock env get ID [--json]

Prints the environment record as key: value lines, or as JSON with --json.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const env = await apiOf(ctx).call(HttpApi.getEnvironment, { params: { id } });
    await write(ctx.io.stdout, args.flags.json ? json(env) : keyValues(env));
    return ExitCode.ok;
  },
};

const updateSub: Command = {
  name: "env update",
  summary: "change an environment",
  help: `usage: paddock env update ID [--name N] [--image I] [--setup S | --setup-file F] [--init S]
                          [--egress HOST]... [--secret NAME]... [--clear-image] [--clear-setup]
                          [--clear-init] [--clear-egress] [--clear-secrets] [--json]

Changes only the fields given and prints the id (the record with --json).
--egress and --secret replace the whole list; --clear-X removes field X.
${FIELD_HELP}
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { ...fieldFlags, ...clearFlags });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const cmd = "paddock env update";
    const fields = await fieldsOf(cmd, args.flags);
    const clears: Array<[keyof typeof clearFlags, string, string, "" | []]> = [
      ["clear-image", "image", "--image", ""],
      ["clear-setup", "setup", "--setup/--setup-file", ""],
      ["clear-init", "init", "--init", ""],
      ["clear-egress", "egressAllow", "--egress", []],
      ["clear-secrets", "secretRefs", "--secret", []],
    ];
    for (const [flag, field, valueFlag, empty] of clears) {
      if (!args.flags[flag]) continue;
      if (field in fields) throw new UsageError(`${cmd}: --${flag} and ${valueFlag} contradict each other`);
      fields[field] = empty;
    }
    if (Object.keys(fields).length === 0) throw new UsageError(`${cmd}: nothing to update (give a field flag or a --clear-* flag)`);
    const body = UpdateEnvironmentBody.safeParse(fields);
    if (!body.success) throw new UsageError(`${cmd}: ${describeZodError(body.error)}`);
    const env = await apiOf(ctx).call(HttpApi.updateEnvironment, { params: { id }, body: body.data });
    await write(ctx.io.stdout, args.flags.json ? json(env) : `${env.id}\n`);
    return ExitCode.ok;
  },
};

const rmSub: Command = {
  name: "env rm",
  summary: "delete environments",
  help: `usage: paddock env rm ID...

Deletes each environment and prints the id of each one deleted. An environment
a live session uses cannot be deleted (conflict). Exits 1 if any deletion failed.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, {});
    if (!args) return ExitCode.ok;
    const ids = positionals(this, args.positionals, ["id"], true);
    const api = apiOf(ctx);
    let code: number = ExitCode.ok;
    for (const id of ids) {
      try {
        await api.call(HttpApi.deleteEnvironment, { params: { id } });
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

const subcommands: readonly Command[] = [createSub, lsSub, getSub, updateSub, rmSub];

export const envCommand: Command = commandGroup({
  name: "env",
  summary: "manage environments (create, ls, get, update, rm)",
  subcommands,
});
