import { UsageError } from "./io.ts";

/** One flag of a command: `--name`, optionally `-n`. */
export interface FlagDef {
  /** `list`: a string flag that may be repeated; its values in order. */
  readonly type: "boolean" | "string" | "int" | "list";
  readonly short?: string;
}
export type FlagSpec = Readonly<Record<string, FlagDef>>;

type FlagValue<D extends FlagDef> = D["type"] extends "boolean"
  ? boolean
  : D["type"] extends "int"
    ? number
    : D["type"] extends "list"
      ? string[]
      : string;
export type FlagValues<S extends FlagSpec> = { [K in keyof S]?: FlagValue<S[K]> };

export interface ParsedArgs<S extends FlagSpec> {
  flags: FlagValues<S>;
  positionals: string[];
  /** Everything after `--` (or, with commandAtFirstPositional, from the first positional on); undefined when absent. */
  rest: string[] | undefined;
}

export interface ParseOptions {
  /** For `run`: the first positional starts the command, so `paddock run ls -la` works without `--`. */
  readonly commandAtFirstPositional?: boolean;
}

/** Every command accepts these. */
export const helpFlag = { help: { type: "boolean", short: "h" } } as const satisfies FlagSpec;

/**
 * Parses argv against a flag spec. Unknown flags, a missing value, a value
 * given to a boolean, and a malformed integer are UsageErrors.
 */
export function parseArgs<S extends FlagSpec>(
  argv: readonly string[],
  spec: S,
  opts: ParseOptions = {},
  command = "paddock",
): ParsedArgs<S> {
  const flags: Record<string, boolean | string | number | string[]> = {};
  const positionals: string[] = [];
  let rest: string[] | undefined;
  const byShort = new Map<string, string>();
  for (const [name, def] of Object.entries(spec)) if (def.short) byShort.set(def.short, name);

  for (let i = 0; i < argv.length; i++) {
    const token = argv[i] ?? "";
    if (token === "--") {
      rest = argv.slice(i + 1);
      break;
    }
    let name: string | undefined;
    let inline: string | undefined;
    if (token.startsWith("--")) {
      const eq = token.indexOf("=");
      name = eq === -1 ? token.slice(2) : token.slice(2, eq);
      inline = eq === -1 ? undefined : token.slice(eq + 1);
      if (!Object.hasOwn(spec, name)) throw new UsageError(`${command}: unknown flag --${name}`);
    } else if (token.startsWith("-") && token.length > 1) {
      const short = token.slice(1, 2);
      name = byShort.get(short);
      if (name === undefined || token.length > 2) throw new UsageError(`${command}: unknown flag ${token}`);
    } else {
      if (opts.commandAtFirstPositional) {
        rest = argv.slice(i);
        break;
      }
      positionals.push(token);
      continue;
    }
    const def = spec[name];
    if (!def) throw new UsageError(`${command}: unknown flag ${token}`);
    if (def.type === "boolean") {
      if (inline !== undefined) throw new UsageError(`${command}: flag --${name} takes no value`);
      flags[name] = true;
      continue;
    }
    let value = inline;
    if (value === undefined) {
      value = argv[i + 1];
      if (value === undefined || value === "--") throw new UsageError(`${command}: flag --${name} needs a value`);
      i++;
    }
    if (def.type === "list") {
      const prior = flags[name];
      flags[name] = [...(Array.isArray(prior) ? prior : []), value];
      continue;
    }
    flags[name] = def.type === "int" ? parsePositiveInt(value, `--${name}`, command) : value;
  }
  return { flags: flags as FlagValues<S>, positionals, rest };
}

function parsePositiveInt(value: string, what: string, command: string): number {
  if (!/^\d{1,9}$/.test(value) || Number(value) < 1) {
    throw new UsageError(`${command}: ${what} must be a positive integer, got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

/** The global flags, taken out of argv wherever they appear before `--`. */
export interface GlobalFlags {
  url?: string;
  token?: string;
  /** argv without the global flags. */
  rest: string[];
}

const globalNames = ["url", "token"] as const;

export function extractGlobalFlags(argv: readonly string[]): GlobalFlags {
  const out: GlobalFlags = { rest: [] };
  for (let i = 0; i < argv.length; i++) {
    const token = argv[i] ?? "";
    if (token === "--") {
      out.rest.push(...argv.slice(i));
      break;
    }
    const name = globalNames.find((n) => token === `--${n}` || token.startsWith(`--${n}=`));
    if (!name) {
      out.rest.push(token);
      continue;
    }
    let value: string | undefined;
    if (token.includes("=")) value = token.slice(token.indexOf("=") + 1);
    else {
      value = argv[i + 1];
      if (value === undefined || value === "--") throw new UsageError(`paddock: flag --${name} needs a value`);
      i++;
    }
    out[name] = value;
  }
  return out;
}
