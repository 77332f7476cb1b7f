// The chaos suite's command line, parsed by a pure function the tests call directly.
import { choiceListFlag, intFlag, parseScriptFlags, switchFlag, type ScriptArgs } from "@paddock/testing";

/** The scenarios in the order a run executes them. */
export const CHAOS_SCENARIOS = ["takeovers", "bad-input", "crashes", "broker", "upgrade"] as const;
export type ChaosScenario = (typeof CHAOS_SCENARIOS)[number];

export interface ChaosArgs {
  /** Small sizes that keep every scenario and finish in under two minutes (CI). */
  readonly quick: boolean;
  /** The run's seed (unsigned 32-bit); undefined means draw a fresh one. */
  readonly seed: number | undefined;
  /** The scenarios to run. */
  readonly only: ReadonlySet<ChaosScenario>;
  /** Keep the stack's data and logs even when nothing went wrong. */
  readonly keepData: boolean;
}

export const CHAOS_USAGE = `usage: pnpm chaos [--quick] [--seed N] [--only ${CHAOS_SCENARIOS.join(",")}] [--keep-data]

  --quick          small sizes (every scenario, under two minutes), as CI runs it
  --seed N         repeat a run's random choices (0 to 4294967295; printed by every run)
  --only LIST      comma-separated scenarios to run (default: all)
  --keep-data      keep the stack's data and logs (kept anyway when a run finds an anomaly)
  -h, --help       this text

Exits 0 when clean, 1 on any anomaly, 2 on a bad command line, 3 on a harness
error and no anomaly (the stack or cluster did not come up, a store could not be
read: not a finding, but the run proved nothing).`;

const SPEC = { quick: { type: "boolean" }, seed: { type: "string" }, only: { type: "string" }, "keep-data": { type: "boolean" } } as const;

export function parseChaosArgs(argv: readonly string[]): ScriptArgs<ChaosArgs> {
  const parsed = parseScriptFlags("chaos", argv, SPEC);
  if (parsed.help) return parsed;
  const flags = parsed.values;
  const seed = flags.has("seed") ? intFlag("chaos", flags, "seed", { min: 0, max: 0xffff_ffff }, 0) : undefined;
  return {
    help: false,
    values: {
      quick: switchFlag(flags, "quick"),
      seed,
      only: new Set(choiceListFlag("chaos", flags, "only", CHAOS_SCENARIOS)),
      keepData: switchFlag(flags, "keep-data"),
    },
  };
}
