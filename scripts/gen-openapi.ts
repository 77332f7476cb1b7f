/**
 * Writes docs/openapi.json, the OpenAPI 3.1 description of the public HTTP
 * API, from the HTTP contract (`@paddock/contracts/openapi`; the gateway
 * serves the same document at GET /v1/openapi.json):
 *
 *   pnpm gen:openapi
 *
 * test/e2e/openapi.test.ts fails when the committed file differs from a fresh rendering.
 */
import { writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { openApiDocument } from "@paddock/contracts/openapi";

export const OPENAPI_PATH = "docs/openapi.json";
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");

export function openApiText(): string {
  return JSON.stringify(openApiDocument(), null, 2) + "\n";
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  writeFileSync(join(repoRoot, OPENAPI_PATH), openApiText());
  process.stdout.write(`wrote ${OPENAPI_PATH}\n`);
}
