/** Latency and rate figures; benchmarks may time things (tests may not). */

export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx] ?? Number.NaN;
}

/** One printed figure: a value, the baseline measured in the same run, and their ratio. */
export interface Figure {
  bench: string;
  metric: string;
  value: number;
  unit: string;
  /** The baseline; its unit defaults to the figure's. */
  baseline?: { name: string; value: number; unit?: string };
  /** value / baseline (for rates, higher is better; for latencies, lower is better). */
  ratio?: number;
  goal?: string;
  /** Whether the goal was met, when the goal can be judged from these figures. */
  met?: boolean;
}

export function figure(f: Omit<Figure, "ratio">): Figure {
  return f.baseline ? { ...f, ratio: f.value / f.baseline.value } : f;
}

export function formatTable(figures: Figure[]): string {
  const rows = figures.map((f) => [
    f.bench,
    f.metric,
    `${round(f.value)} ${f.unit}`,
    f.baseline ? `${f.baseline.name}: ${round(f.baseline.value)} ${f.baseline.unit ?? f.unit}` : "",
    f.ratio !== undefined ? `${round(f.ratio)}x` : "",
    f.goal ?? "",
    f.met === undefined ? "" : f.met ? "met" : "MISSED",
  ]);
  const head = ["bench", "metric", "value", "baseline (same run)", "ratio", "goal", ""];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join("  ").trimEnd();
  return [line(head), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}

function round(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  return Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 10 ? n.toFixed(1) : n.toFixed(2);
}
