import { helpFlag, parseArgs, type FlagSpec, type ParseOptions, type ParsedArgs } from "./args.ts";
import { requireToken, type CliConfig } from "./config.ts";
import { ApiClient } from "./http.ts";
import { UsageError, type CliIo } from "./io.ts";

/** What every command gets: the outside world and the configuration. */
export interface Ctx {
  readonly io: CliIo;
  readonly config: CliConfig;
}

export interface Command {
  readonly name: string;
  readonly summary: string;
  /** Full help text, starting with the usage line. */
  readonly help: string;
  run(ctx: Ctx, argv: readonly string[]): Promise<number>;
}

/** An API client; throws the missing-token UsageError when there is no token. */
export function apiOf(ctx: Ctx): ApiClient {
  return new ApiClient(ctx.config.url, requireToken(ctx.config));
}

/** Parses a command's argv; undefined when --help was asked for (and printed). */
export function parseCommand<S extends FlagSpec>(
  ctx: Ctx,
  cmd: Pick<Command, "name" | "help">,
  argv: readonly string[],
  spec: S,
  opts: ParseOptions = {},
): ParsedArgs<S & typeof helpFlag> | undefined {
  // --help wins wherever it is before `--`, even next to an otherwise bad flag.
  const before = argv.indexOf("--") === -1 ? argv : argv.slice(0, argv.indexOf("--"));
  if (before.includes("--help") || before.includes("-h")) {
    ctx.io.stdout.write(cmd.help);
    return undefined;
  }
  return parseArgs(argv, { ...spec, ...helpFlag }, opts, `paddock ${cmd.name}`);
}

/** Exactly n positionals, or a UsageError naming them. */
export function positionals(cmd: Pick<Command, "name">, got: readonly string[], names: readonly string[], variadic = false): string[] {
  if (got.length < names.length || (!variadic && got.length > names.length)) {
    const want = names.length ? names.map((n) => n.toUpperCase()).join(" ") + (variadic ? "..." : "") : "nothing";
    throw new UsageError(`paddock ${cmd.name}: expected ${want}, got ${got.length ? got.map((g) => JSON.stringify(g)).join(" ") : "nothing"}`);
  }
  return [...got];
}

/** One line for the user on stderr; in raw mode a line needs \r\n and a fresh line first. */
export function notice(ctx: Ctx, text: string, raw = false): void {
  ctx.io.stderr.write(raw ? `\r\n[paddock] ${text}\r\n` : `[paddock] ${text}\n`);
}

/** "a, b or c": a list of subcommand names for a message. */
function orList(names: readonly string[]): string {
  return names.length < 2 ? (names[0] ?? "") : `${names.slice(0, -1).join(", ")} or ${names.at(-1) ?? ""}`;
}

/**
 * A command made of subcommands (`paddock NAME SUB ...`): its help lists them,
 * and a missing or unknown one is a usage error naming what there is.
 */
export function commandGroup(group: { name: string; summary: string; subcommands: readonly Command[]; usage?: string; footer?: string }): Command {
  const subName = (c: Command) => c.name.slice(group.name.length + 1);
  const names = group.subcommands.map(subName);
  const width = Math.max(...names.map((n) => n.length));
  const help = `usage: ${group.usage ?? `paddock ${group.name} SUBCOMMAND [ARGS...]`}

Subcommands:
${group.subcommands.map((c) => `  ${subName(c).padEnd(width)}  ${c.summary}`).join("\n")}

${group.footer ?? `Run 'paddock ${group.name} SUBCOMMAND --help' for its flags.`}
`;
  return {
    name: group.name,
    summary: group.summary,
    help,
    async run(ctx, argv) {
      const [sub, ...rest] = argv;
      if (sub === "--help" || sub === "-h") {
        ctx.io.stdout.write(help);
        return 0;
      }
      if (sub === undefined) throw new UsageError(`paddock ${group.name}: expected a subcommand: ${orList(names)}`);
      const command = group.subcommands.find((c) => c.name === `${group.name} ${sub}`);
      if (!command) throw new UsageError(`paddock ${group.name}: unknown subcommand ${JSON.stringify(sub)}`);
      return command.run(ctx, rest);
    },
  };
}
