// The benchmark suite's command line, parsed by a pure function the tests call directly.
import { choiceListFlag, parseScriptFlags, switchFlag, type ScriptArgs } from "@paddock/testing";

/** The benchmark groups in the order a run executes them. */
export const BENCH_GROUPS = ["lifecycle", "checkpoint", "terminal", "memory", "images", "sandbox", "files", "exec", "preview", "console", "webhooks", "build"] as const;
export type BenchGroup = (typeof BENCH_GROUPS)[number];

export interface BenchArgs {
  /** Small sizes that keep every figure and finish in under two minutes (CI). */
  readonly quick: boolean;
  /** The groups to run. */
  readonly only: ReadonlySet<BenchGroup>;
}

export const BENCH_USAGE = `usage: pnpm bench [--quick] [--only ${BENCH_GROUPS.join(",")}]

  --quick          small sizes (every figure, under two minutes), as CI runs it
  --only LIST      comma-separated groups to run (default: all)
  -h, --help       this text

Prints every speed figure beside a baseline measured in the same run; writes JSON under bench-results/.`;

const SPEC = { quick: { type: "boolean" }, only: { type: "string" } } as const;

export function parseBenchArgs(argv: readonly string[]): ScriptArgs<BenchArgs> {
  const parsed = parseScriptFlags("bench", argv, SPEC);
  if (parsed.help) return parsed;
  return {
    help: false,
    values: { quick: switchFlag(parsed.values, "quick"), only: new Set(choiceListFlag("bench", parsed.values, "only", BENCH_GROUPS)) },
  };
}
