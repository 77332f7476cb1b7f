import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { schemaFiles, repoRoot } from "../../../scripts/gen-schemas.ts";

describe("generated JSON Schemas", () => {
  for (const [path, text] of Object.entries(schemaFiles())) {
    it(`${path} is committed exactly as generated (run \`pnpm gen:schemas\`)`, () => {
      let committed = "";
      try {
        committed = readFileSync(join(repoRoot, path), "utf8");
      } catch {
        // missing: fails below
      }
      expect(committed, `${path} is stale: run pnpm gen:schemas`).toBe(text);
    });
  }

  it("the audit event schema is closed: no field beyond the fixed ones", () => {
    const schema = JSON.parse(schemaFiles()["docs/schemas/audit-event.schema.json"] ?? "{}") as {
      additionalProperties: unknown;
      required: string[];
      properties: Record<string, { additionalProperties?: unknown }>;
    };
    expect(schema.additionalProperties).toBe(false);
    expect(schema.required.sort()).toEqual(["action", "actorId", "at", "id", "placementGeneration", "resource", "usage", "workspaceId"]);
    expect(schema.properties.resource?.additionalProperties).toBe(false);
    expect(schema.properties.usage?.additionalProperties).toBe(false);
    expect(schema.properties.run?.additionalProperties).toBe(false);
  });
});
