import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { API_DOC_PATH, apiDoc, repoRoot } from "../../../../scripts/gen-api-doc.ts";
import { routeName } from "./route.ts";
import { HttpApi } from "./routes.ts";

describe("docs/api.md", () => {
  it("is committed exactly as generated from the HTTP contract (run `pnpm gen:api-doc`)", () => {
    let committed = "";
    try {
      committed = readFileSync(join(repoRoot, API_DOC_PATH), "utf8");
    } catch {
      // missing: fails below
    }
    expect(committed, `${API_DOC_PATH} is stale: run pnpm gen:api-doc`).toBe(apiDoc());
  });

  it("documents every route of the contract", () => {
    const doc = apiDoc();
    for (const r of Object.values(HttpApi)) expect(doc).toContain(`### \`${routeName(r)}\``);
  });
});
