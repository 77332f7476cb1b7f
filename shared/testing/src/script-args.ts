// Flag parsing for the repo's scripts (`up`, `bench`, `chaos`): a bad flag is one
// clear line and the usage on stderr with exit code 2, `--help` is the usage on
// stdout with exit code 0 — never a stack trace, never a run with a value it
// silently misread.
import { parseArgs } from "node:util";

/** The command line asks for something the script does not take; nothing has run yet. */
export class ScriptUsageError extends Error {
  readonly code = "usage" as const;
  override readonly name = "ScriptUsageError";
}

/** What a script's pure parser answers: the usage was asked for, or the values to run with. */
export type ScriptArgs<V> = { readonly help: true } | { readonly help: false; readonly values: V };

/** One flag: a switch, or a flag that takes a value (`--name value` or `--name=value`). */
export type ScriptFlagSpec = Readonly<Record<string, { readonly type: "boolean" | "string" }>>;

/** Raw flag values by name: booleans for switches, the last string given for the rest. */
export type RawScriptFlags = ReadonlyMap<string, boolean | string>;

/**
 * Parses argv (without node and the script) strictly against `spec`: unknown
 * flags, positionals, a missing value and a value given to a switch are
 * ScriptUsageErrors naming the script. `--help`/`-h` anywhere means help.
 */
export function parseScriptFlags(script: string, argv: readonly string[], spec: ScriptFlagSpec): ScriptArgs<RawScriptFlags> {
  if (argv.includes("--help") || argv.includes("-h")) return { help: true };
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args: [...argv], options: { ...spec }, strict: true, allowPositionals: false });
  } catch (err) {
    throw new ScriptUsageError(`${script}: ${oneLine(err)}`);
  }
  const values = new Map<string, boolean | string>();
  for (const [name, value] of Object.entries(parsed.values)) {
    if (typeof value === "boolean" || typeof value === "string") values.set(name, value);
  }
  return { help: false, values };
}

/** node's parse error on one line; its hint about a `--` separator does not apply where positionals are refused. */
function oneLine(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as { code?: unknown }).code;
  const text = code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" ? (err.message.split(". ")[0] ?? err.message) : err.message;
  return text
    .split("\n")
    .map((line) => line.trim().replace(/\.$/, ""))
    .filter((line) => line !== "")
    .join("; ");
}

/** A switch's value; absent means off. */
export function switchFlag(flags: RawScriptFlags, name: string): boolean {
  return flags.get(name) === true;
}

/** A string flag's value, or `fallback`; an empty value is a usage error. */
export function stringFlag(script: string, flags: RawScriptFlags, name: string, fallback: string): string {
  const raw = flags.get(name);
  if (raw === undefined) return fallback;
  if (typeof raw !== "string" || raw.trim() === "") throw new ScriptUsageError(`${script}: --${name} needs a value`);
  return raw;
}

/** An integer flag in [min, max] written in decimal, or `fallback` when absent. */
export function intFlag(script: string, flags: RawScriptFlags, name: string, range: { min: number; max: number }, fallback: number): number {
  const raw = flags.get(name);
  if (raw === undefined) return fallback;
  const value = typeof raw === "string" && /^-?\d+$/.test(raw.trim()) ? Number(raw.trim()) : Number.NaN;
  if (!Number.isSafeInteger(value) || value < range.min || value > range.max) {
    throw new ScriptUsageError(`${script}: --${name} must be an integer from ${range.min} to ${range.max}, got ${JSON.stringify(raw)}`);
  }
  return value;
}

/** A comma-separated subset of `allowed` (duplicates dropped, order kept), or all of `allowed` when absent. */
export function choiceListFlag<T extends string>(script: string, flags: RawScriptFlags, name: string, allowed: readonly T[]): T[] {
  const raw = flags.get(name);
  if (raw === undefined) return [...allowed];
  const picked: T[] = [];
  for (const part of String(raw).split(",").map((s) => s.trim())) {
    const choice = allowed.find((a) => a === part);
    if (choice === undefined) {
      throw new ScriptUsageError(`${script}: --${name}: unknown ${JSON.stringify(part)}; expected a comma-separated list of ${allowed.join(", ")}`);
    }
    if (!picked.includes(choice)) picked.push(choice);
  }
  return picked;
}

/**
 * Runs a script's pure parser on the process's argv: prints the usage and exits
 * 0 on `--help`, prints the error and the usage and exits 2 on a usage error.
 */
export function parseScriptArgsOrExit<V>(usage: string, parse: (argv: readonly string[]) => ScriptArgs<V>, argv: readonly string[] = process.argv.slice(2)): V {
  let parsed: ScriptArgs<V>;
  try {
    parsed = parse(argv);
  } catch (err) {
    if (!(err instanceof ScriptUsageError)) throw err;
    process.stderr.write(`${err.message}\n\n${usage}\n`);
    process.exit(2);
  }
  if (parsed.help) {
    process.stdout.write(`${usage}\n`);
    process.exit(0);
  }
  return parsed.values;
}
