/** What each scenario reports: exact anomaly counts, and figures with how they were measured. */

export interface Measured {
  metric: string;
  value: number;
  unit: string;
  /** How the figure was measured (time figures always say). */
  method?: string;
}

export interface ScenarioResult {
  name: string;
  /** Faults injected (signals sent, nodes killed, malformed inputs sent). */
  faults: number;
  /** Sessions the scenario's workload created. */
  sessions: number;
  /** Every anomaly kind the scenario checks, with its exact count (the goal is zero everywhere). */
  anomalies: Record<string, number>;
  figures: Measured[];
  /** The first few anomalies, described well enough to reproduce (ids, seeds, inputs). */
  details: string[];
  seconds: number;
  /**
   * The harness itself failed (the stack or the cluster did not come up, a
   * store could not be read): not a finding about the system, and not a clean
   * run either — the scenario proved nothing. Reported as HARNESS ERROR.
   */
  error?: string;
}

const MAX_DETAILS = 60;
/** Details kept per anomaly kind (the count stays exact). */
const MAX_DETAILS_PER_KIND = 6;

/** Collects anomaly counts by kind; every kind is declared up front so a zero is printed too. */
export class Anomalies {
  readonly counts: Record<string, number> = {};
  readonly details: string[] = [];
  private readonly detailed = new Map<string, number>();

  constructor(kinds: readonly string[]) {
    for (const k of kinds) this.counts[k] = 0;
  }

  add(kind: string, detail?: string, n = 1): void {
    if (n <= 0) return;
    this.counts[kind] = (this.counts[kind] ?? 0) + n;
    const shown = this.detailed.get(kind) ?? 0;
    if (detail === undefined || this.details.length >= MAX_DETAILS) return;
    if (shown < MAX_DETAILS_PER_KIND) this.details.push(`${kind}: ${detail}`);
    else if (shown === MAX_DETAILS_PER_KIND) this.details.push(`${kind}: … (further ones counted, not listed)`);
    this.detailed.set(kind, shown + 1);
  }

  get total(): number {
    return Object.values(this.counts).reduce((a, b) => a + b, 0);
  }
}

export function totalAnomalies(r: ScenarioResult): number {
  return Object.values(r.anomalies).reduce((a, b) => a + b, 0);
}

/** Exit codes of a chaos run (2 is a bad command line, before anything runs). */
export const ChaosExit = { clean: 0, anomaly: 1, usage: 2, harnessError: 3 } as const;

/**
 * The chaos run's exit code: 1 when any scenario found an anomaly (a finding
 * outranks everything), else 3 when a scenario's harness failed (the run
 * proved nothing: CI fails too, under its own label), else 0.
 */
export function runExitCode(results: readonly ScenarioResult[]): 0 | 1 | 3 {
  if (results.some((r) => totalAnomalies(r) > 0)) return ChaosExit.anomaly;
  if (results.some((r) => r.error !== undefined)) return ChaosExit.harnessError;
  return ChaosExit.clean;
}

/** The run's last line: anomalies and harness errors counted apart. */
export function summaryLine(results: readonly ScenarioResult[]): string {
  const anomalies = results.reduce((n, r) => n + totalAnomalies(r), 0);
  const failed = results.filter((r) => r.error !== undefined).map((r) => r.name);
  const harness = failed.length === 0 ? "no harness errors" : `HARNESS ERROR in ${failed.join(", ")} (not a finding; those scenarios proved nothing)`;
  return `${anomalies} anomal${anomalies === 1 ? "y" : "ies"}; ${harness}`;
}

export function formatResults(results: ScenarioResult[]): string {
  const rows: string[][] = [];
  for (const r of results) {
    rows.push([r.name, "faults injected", String(r.faults), ""]);
    rows.push([r.name, "sessions", String(r.sessions), ""]);
    if (r.error) rows.push([r.name, "HARNESS ERROR", "1", `${r.error.split("\n")[0] ?? ""} (not an anomaly; counts below are incomplete)`]);
    rows.push([r.name, "anomalies", String(totalAnomalies(r)), "goal: 0"]);
    for (const [kind, n] of Object.entries(r.anomalies)) rows.push([r.name, `  ${kind}`, String(n), n > 0 ? "ANOMALY" : ""]);
    for (const f of r.figures) rows.push([r.name, f.metric, `${round(f.value)} ${f.unit}`, f.method ?? ""]);
    rows.push([r.name, "wall time", `${round(r.seconds)} s`, ""]);
  }
  const head = ["scenario", "figure", "value", "method / note"];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => (i === 3 ? 0 : (row[i] ?? "").length))));
  const line = (cells: string[]) => cells.map((c, i) => (i === 3 ? c : c.padEnd(widths[i] ?? 0))).join("  ").trimEnd();
  return [line(head), line(widths.map((w, i) => "-".repeat(i === 3 ? 13 : w))), ...rows.map(line)].join("\n");
}

function round(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  if (Number.isInteger(n)) return String(n);
  return Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 10 ? n.toFixed(1) : n.toFixed(2);
}

export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx] ?? Number.NaN;
}

/** Progress lines go to stderr so the table on stdout stays clean. */
export function log(scenario: string, msg: string): void {
  process.stderr.write(`[chaos ${new Date().toISOString().slice(11, 23)} ${scenario}] ${msg}\n`);
}
