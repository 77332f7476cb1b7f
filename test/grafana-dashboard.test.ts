/**
 * The Grafana dashboard (deploy/grafana/paddock-dashboard.json) queries only
 * metrics the services define: a metric renamed or removed in the code fails
 * here rather than leaving an empty panel.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { repoRoot } from "@paddock/testing";

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (name === "node_modules") return [];
    if (statSync(path).isDirectory()) return tsFiles(path);
    return name.endsWith(".ts") && !name.endsWith(".test.ts") ? [path] : [];
  });
}

describe("the Grafana dashboard", () => {
  it("is a dashboard whose every query names metrics the services define", () => {
    const dashboard = JSON.parse(readFileSync(join(repoRoot, "deploy/grafana/paddock-dashboard.json"), "utf8")) as {
      title: string;
      panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
    };
    expect(dashboard.title).toBe("Paddock");
    const defined = new Set<string>();
    for (const file of [...tsFiles(join(repoRoot, "services")), ...tsFiles(join(repoRoot, "shared"))]) {
      for (const m of readFileSync(file, "utf8").matchAll(/name: "(paddock_[a-z_]+)"/g)) defined.add(m[1] ?? "");
    }
    expect(defined.size).toBeGreaterThan(20);
    const queried = dashboard.panels.flatMap((p) => p.targets.flatMap((t) => [...t.expr.matchAll(/paddock_[a-z_]+/g)].map((m) => m[0])));
    expect(queried.length).toBeGreaterThanOrEqual(dashboard.panels.length);
    const missing = queried.map((q) => q.replace(/_(bucket|sum|count)$/, "")).filter((q) => !defined.has(q));
    expect(missing).toEqual([]);
  });
});
