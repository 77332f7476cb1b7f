/**
 * Generates the JSON Schemas of the public event contracts from their zod
 * schemas (zod 4's z.toJSONSchema), so docs never drift from the code:
 *
 *   pnpm gen:schemas          # writes docs/schemas/*.schema.json
 *
 * A test (services/event-recorder/src/schemas.test.ts) fails when a committed
 * file differs from a fresh generation.
 */
import { writeFileSync, mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { AuditEvent } from "@paddock/contracts";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** Every generated file: path relative to the repo root → its exact text. */
export function schemaFiles(): Record<string, string> {
  const { $schema, ...generated } = z.toJSONSchema(AuditEvent);
  const audit = {
    $schema,
    $id: "https://paddock.dev/schemas/audit-event.schema.json",
    title: "AuditEvent",
    description:
      "One fixed-field Paddock audit event, as published on AUDIT subject paddock.audit.<workspace>.<kind>.<id> (message id = id). " +
      "Generated from shared/contracts/src/audit.ts by scripts/gen-schemas.ts; do not edit.",
    ...generated,
  };
  return { "docs/schemas/audit-event.schema.json": JSON.stringify(audit, null, 2) + "\n" };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  for (const [path, text] of Object.entries(schemaFiles())) {
    const file = join(repoRoot, path);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, text);
    process.stdout.write(`wrote ${path}\n`);
  }
}
