/**
 * Generates docs/api.md, the reference of the public HTTP API, from the HTTP
 * contract (shared/contracts/src/http/routes.ts), so the doc never drifts
 * from the routes the gateway serves:
 *
 *   pnpm gen:api-doc          # writes docs/api.md
 *
 * A test (shared/contracts/src/http/api-doc.test.ts) fails when the committed
 * file differs from a fresh generation.
 */
import { writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import * as contracts from "@paddock/contracts";
import { HealthRoutes, HttpApi, httpStatusOf, PublicApi, pathParamNames, routeName, type HttpRoute } from "@paddock/contracts";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const API_DOC_PATH = "docs/api.md";

type JsonSchema = { type?: string | string[]; enum?: unknown[]; pattern?: string; const?: unknown; properties?: Record<string, JsonSchema>; required?: string[] };

/** The named object schemas of the contracts (schema → export name), so a shape used by many routes is written once. */
function namedSchemas(): Map<z.ZodType, string> {
  const names = new Map<z.ZodType, string>();
  for (const [name, value] of Object.entries(contracts).sort(([a], [b]) => a.localeCompare(b))) {
    const isShape = value instanceof z.ZodObject || value instanceof z.ZodDiscriminatedUnion;
    if (isShape && /^[A-Z]/.test(name) && !names.has(value)) names.set(value, name);
  }
  return names;
}

const anchor = (name: string) => `#${name.toLowerCase()}`;

/** Every named schema as JSON Schema, a named one inside another written as a $ref to its section. */
function namedJsonSchemas(names: Map<z.ZodType, string>, io: "input" | "output"): Record<string, JsonSchema> {
  const registry = z.registry<{ id: string }>();
  for (const [schema, id] of names) registry.add(schema, { id });
  const { schemas } = z.toJSONSchema(registry, { io, unrepresentable: "any", uri: anchor });
  const out: Record<string, JsonSchema> = {};
  for (const [id, schema] of Object.entries(schemas)) {
    const { $schema: _s, $id: _i, ...rest } = schema as JsonSchema & { $schema?: string; $id?: string };
    out[id] = rest;
  }
  return out;
}

const jsonSchemaOf = (schema: z.ZodType, io: "input" | "output"): JsonSchema => {
  const { $schema: _drop, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: "any" }) as JsonSchema & { $schema?: string };
  return rest;
};

/** `string (^[A-Za-z0-9_-]{1,64}$)`, `"true" | "false"`: one cell of a parameter table. */
function typeCell(s: JsonSchema): string {
  if (s.enum) return s.enum.map((v) => `\`${JSON.stringify(v)}\``).join(" \\| ");
  if (s.const !== undefined) return `\`${JSON.stringify(s.const)}\``;
  const type = Array.isArray(s.type) ? s.type.join(" | ") : (s.type ?? "any");
  return s.pattern ? `${type} \`${s.pattern.replace(/\|/g, "\\|")}\`` : type;
}

function paramTable(title: string, schema: JsonSchema): string[] {
  const props = Object.entries(schema.properties ?? {});
  if (props.length === 0) return [];
  const required = new Set(schema.required ?? []);
  return [`${title}:`, "", "| name | type | required |", "| --- | --- | --- |", ...props.map(([k, v]) => `| \`${k}\` | ${typeCell(v)} | ${required.has(k) ? "yes" : "no"} |`), ""];
}

function shapeRef(schema: z.ZodType, io: "input" | "output", names: Map<z.ZodType, string>, used: Map<string, "input" | "output">): string {
  const name = names.get(schema);
  if (name) {
    // A body is documented as sent (before defaults), an answer as received.
    if (used.get(name) !== "input") used.set(name, io);
    return `[\`${name}\`](${anchor(name)})`;
  }
  return "`" + JSON.stringify(jsonSchemaOf(schema, io)) + "`";
}

function renderRoute(key: string, r: HttpRoute, names: Map<z.ZodType, string>, used: Map<string, "input" | "output">, auth: boolean): string[] {
  const out = [`### \`${routeName(r)}\``, "", `${r.summary} (\`${key}\`)`, ""];
  out.push(auth ? "Auth: `Authorization: Bearer <token>`." : "Auth: none.", "");
  if (pathParamNames(r.path).length) out.push(...paramTable("Path parameters", jsonSchemaOf(r.params, "input")));
  out.push(...paramTable("Query parameters (unknown or repeated ones are `invalid`)", jsonSchemaOf(r.query, "input")));
  if (r.body.kind === "json") {
    out.push(`Body: \`application/json\`${r.body.optional ? " (optional: an empty body reads as `{}`)" : ""}${r.body.maxBytes !== undefined ? `, at most ${r.body.maxBytes} bytes` : ""}: ${shapeRef(r.body.schema, "input", names, used)}`, "");
  } else if (r.body.kind === "bytes") {
    out.push(`Body: raw \`${r.body.contentType}\`, streamed.`, "");
  }
  out.push("Responses:", "");
  for (const res of r.responses) {
    const status = res.status.join(", ");
    if (res.kind === "json") out.push(`- ${status} \`application/json\`${res.when ? ` (${res.when})` : ""}: ${shapeRef(res.schema, "output", names, used)}`);
    else if (res.kind === "ndjson") out.push(`- ${status} \`application/x-ndjson\` (${res.when}): one ${shapeRef(res.schema, "output", names, used)} per line`);
    else if (res.kind === "bytes") out.push(`- ${status} \`${res.contentType}\`${Object.entries(res.headers ?? {}).map(([h, d]) => `; header \`${h}\`: ${d}`).join("")}`);
    else if (res.kind === "websocket") out.push(`- ${status} WebSocket upgrade; server frames: ${shapeRef(res.schema, "output", names, used)}`);
    else out.push(`- ${status}, no body`);
  }
  const errors = [...new Set([...(auth ? (["invalid", "unauthenticated"] as const) : []), ...r.errors])];
  if (errors.length) out.push(`- errors: ${errors.map((c) => `${httpStatusOf[c]} \`${c}\``).join(", ")}`);
  out.push("");
  return out;
}

/** The text of docs/api.md. */
export function apiDoc(): string {
  const names = namedSchemas();
  const used = new Map<string, "input" | "output">();
  const out = [
    "# HTTP API",
    "",
    "Generated from the HTTP contract (`shared/contracts/src/http/routes.ts`) by `scripts/gen-api-doc.ts`; do not edit.",
    "Every error is `{\"error\":{\"code\",\"message\"}}` with the status of its code; a known path with a wrong method is 405",
    "`invalid` with an `Allow` header, an unknown path 404 `not_found`. Any `/v1` route may also answer 503 `unavailable`.",
    "",
    "## Routes",
    "",
  ];
  for (const [key, r] of Object.entries(HttpApi) as Array<[string, HttpRoute]>) out.push(...renderRoute(key, r, names, used, true));
  out.push("## Without a token", "", "How a person gets a token (single sign-on, docs/auth.md); an Authorization header is ignored.", "");
  for (const [key, r] of Object.entries(PublicApi) as Array<[string, HttpRoute]>) out.push(...renderRoute(key, r, names, used, false));
  out.push("## Probes", "");
  for (const [key, r] of Object.entries(HealthRoutes) as Array<[string, HttpRoute]>) out.push(...renderRoute(key, r, names, used, false));
  out.push("## Schemas", "", "JSON Schema (draft 2020-12) of each named shape above, as the contract's zod schema defines it.", "");
  const generated = { input: namedJsonSchemas(names, "input"), output: namedJsonSchemas(names, "output") };
  // The shapes named above, and every shape they refer to.
  const pending = [...used.keys()];
  while (pending.length) {
    const name = pending.pop() ?? "";
    const text = JSON.stringify(generated[used.get(name) ?? "output"][name] ?? {});
    for (const m of text.matchAll(/"\$ref":"#([a-z0-9]+)"/g)) {
      const ref = [...names.values()].find((n) => n.toLowerCase() === m[1]);
      if (ref !== undefined && !used.has(ref)) {
        used.set(ref, used.get(name) ?? "output");
        pending.push(ref);
      }
    }
  }
  for (const name of [...used.keys()].sort()) {
    out.push(`### ${name}`, "", "```json", JSON.stringify(generated[used.get(name) ?? "output"][name] ?? {}, null, 2), "```", "");
  }
  return out.join("\n");
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  writeFileSync(join(repoRoot, API_DOC_PATH), apiDoc());
  process.stdout.write(`wrote ${API_DOC_PATH}\n`);
}
