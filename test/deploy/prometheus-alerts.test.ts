/**
 * deploy/prometheus/alerts.yml (docs/operations.md, Alerts) is Prometheus rule
 * YAML whose every alert names only metrics the services define: the names are
 * read from the code at test time, so a metric renamed or removed there fails
 * here rather than leaving an alert that can never fire.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { repoRoot } from "@paddock/testing";

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (name === "node_modules") return [];
    if (statSync(path).isDirectory()) return tsFiles(path);
    return name.endsWith(".ts") && !name.endsWith(".test.ts") ? [path] : [];
  });
}

/** Every metric a prom-client constructor in services/ or shared/ names. */
function definedMetrics(): Set<string> {
  const defined = new Set<string>();
  for (const file of [...tsFiles(join(repoRoot, "services")), ...tsFiles(join(repoRoot, "shared"))]) {
    for (const m of readFileSync(file, "utf8").matchAll(/name: "(paddock_[a-z0-9_]+)"/g)) defined.add(m[1] ?? "");
  }
  return defined;
}

interface Rule {
  alert?: unknown;
  expr?: unknown;
  for?: unknown;
  labels?: { severity?: unknown };
  annotations?: { summary?: unknown; runbook?: unknown };
}

describe("the Prometheus alert rules", () => {
  const rules = (parse(readFileSync(join(repoRoot, "deploy/prometheus/alerts.yml"), "utf8")) as { groups: Array<{ name: string; rules: Rule[] }> }).groups.flatMap((g) => g.rules);

  it("are alerting rules with an expression, a severity, a summary and the runbook", () => {
    expect(rules.length).toBeGreaterThanOrEqual(10);
    for (const r of rules) {
      expect(typeof r.alert, JSON.stringify(r)).toBe("string");
      expect(typeof r.expr, String(r.alert)).toBe("string");
      expect(["info", "warning", "critical"], String(r.alert)).toContain(r.labels?.severity);
      expect(typeof r.annotations?.summary, String(r.alert)).toBe("string");
      expect(r.annotations?.runbook, String(r.alert)).toBe("docs/operations.md#alerts");
      if (r.for !== undefined) expect(String(r.for)).toMatch(/^\d+[smh]$/);
    }
    expect(new Set(rules.map((r) => r.alert)).size).toBe(rules.length);
  });

  it("name only metrics the services define (histogram series by their base name)", () => {
    const defined = definedMetrics();
    expect(defined.size).toBeGreaterThan(20);
    for (const r of rules) {
      const named = [...String(r.expr).matchAll(/paddock_[a-z0-9_]+/g)].map((m) => m[0].replace(/_(bucket|sum|count)$/, ""));
      expect(named.length, `${String(r.alert)} names no paddock metric`).toBeGreaterThan(0);
      expect(named.filter((n) => !defined.has(n)), String(r.alert)).toEqual([]);
    }
  });

  it("are each explained in docs/operations.md", () => {
    const doc = readFileSync(join(repoRoot, "docs/operations.md"), "utf8");
    expect(rules.map((r) => String(r.alert)).filter((a) => !doc.includes(a))).toEqual([]);
  });
});
