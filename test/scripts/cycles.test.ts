/**
 * `pnpm run cycles` (a step of `npm test`): the import-cycle check counts
 * type-only imports, which eslint's import-x/no-cycle skips. Run on a tiny
 * project written here, so the proof does not depend on the repo's own graph.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { repoRoot } from "@paddock/testing";

const TSCONFIG = {
  compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", allowImportingTsExtensions: true, verbatimModuleSyntax: true, noEmit: true },
};

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Writes `files` into a fresh folder and runs the repo's cycle check on it. */
function checkCycles(files: Record<string, string>): { status: number | null; output: string } {
  const dir = mkdtempSync(join(tmpdir(), "paddock-cycles-"));
  dirs.push(dir);
  writeFileSync(join(dir, "tsconfig.json"), JSON.stringify(TSCONFIG));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  const r = spawnSync(join(repoRoot, "node_modules", ".bin", "depcruise"), ["--config", join(repoRoot, ".dependency-cruiser.mjs"), "--output-type", "err", "."], {
    cwd: dir,
    encoding: "utf8",
  });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

describe("the import-cycle check", () => {
  it("fails on a cycle made only of `import type`", () => {
    const r = checkCycles({
      "a.ts": `import type { B } from "./b.ts";\nexport interface A { b?: B }\n`,
      "b.ts": `import type { A } from "./a.ts";\nexport interface B { a?: A }\n`,
    });
    expect(r.status).not.toBe(0);
    expect(r.output).toContain("no-circular");
    expect(r.output).toMatch(/a\.ts[\s\S]*b\.ts/);
  });

  it("passes the same modules once the shared type lives in a leaf", () => {
    const r = checkCycles({
      "leaf.ts": `export interface A { b?: B }\nexport interface B { a?: A }\n`,
      "a.ts": `import type { B } from "./leaf.ts";\nexport const a: B = {};\n`,
      "b.ts": `import type { A } from "./leaf.ts";\nimport { a } from "./a.ts";\nexport const b: A = { b: a };\n`,
    });
    expect(r.output).toContain("no dependency violations");
    expect(r.status).toBe(0);
  });
});
