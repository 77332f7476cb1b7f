/**
 * The OpenAPI 3.1 description of the public HTTP API, generated from the HTTP
 * contract (every route of HttpApi, PublicApi and HealthRoutes, their zod schemas through
 * zod 4's JSON Schema output, draft 2020-12 as OpenAPI 3.1 uses). The gateway
 * serves it at GET /v1/openapi.json and docs/openapi.json is its committed
 * rendering. A module of its own (`@paddock/contracts/openapi`): it reads the
 * whole contract index to name the shapes routes share.
 */
import { z } from "zod";
import * as contracts from "./index.ts";
import { ErrorBody, httpStatusOf, type ErrorCode } from "./errors.ts";
import { HealthRoutes, HttpApi, PublicApi } from "./http/routes.ts";
import { NDJSON, pathParamNames, type HttpRoute } from "./http/route.ts";

type Json = Record<string, unknown>;

/** The API's version as the description states it (the routes are /v1). */
export const OPENAPI_API_VERSION = "1.0.0";

/** The contract's exported object schemas, by export name: each becomes one component a route refers to. */
function namedSchemas(): Map<z.ZodType, string> {
  const names = new Map<z.ZodType, string>();
  for (const [name, value] of Object.entries(contracts).sort(([a], [b]) => a.localeCompare(b))) {
    const shape = value instanceof z.ZodObject || value instanceof z.ZodDiscriminatedUnion;
    if (shape && /^[A-Z]/.test(name) && !names.has(value)) names.set(value, name);
  }
  return names;
}

const ref = (id: string) => `#/components/schemas/${id}`;

/** Components for one direction: responses see outputs (defaults applied), requests inputs; the same name differs only where the two do. */
function components(names: Map<z.ZodType, string>, io: "input" | "output", suffix: string): Record<string, Json> {
  const registry = z.registry<{ id: string }>();
  for (const [schema, id] of names) registry.add(schema, { id: `${id}${suffix}` });
  const { schemas } = z.toJSONSchema(registry, { io, unrepresentable: "any", uri: ref });
  return Object.fromEntries(Object.entries(schemas).map(([id, s]) => [id, strip(s as Json)]));
}

function strip(s: Json): Json {
  const { $schema: _s, $id: _i, ...rest } = s;
  return rest;
}

/**
 * Shapes an inline schema repeats without a name of its own (zod writes them
 * as local `$defs`), hoisted into components: an OpenAPI document resolves
 * `#/...` from its root, so a local `#/$defs/X` would point nowhere.
 */
class Hoisted {
  readonly schemas: Record<string, Json> = {};
  private readonly byText = new Map<string, string>();

  hoist(schema: Json, taken: (id: string) => boolean): Json {
    const { $defs, ...rest } = schema as Json & { $defs?: Record<string, Json> };
    if (!$defs) return rest;
    const renamed = new Map<string, string>();
    for (const [name, def] of Object.entries($defs)) {
      // A named shape (its id from the registry) is a component already: referred to, not copied.
      if (taken(name)) {
        renamed.set(`#/$defs/${name}`, ref(name));
        continue;
      }
      const text = JSON.stringify(def);
      let id = this.byText.get(text);
      if (!id) {
        id = name;
        for (let n = 2; taken(id) || this.schemas[id] !== undefined; n++) id = `${name}_${n}`;
        this.byText.set(text, id);
        this.schemas[id] = def;
      }
      renamed.set(`#/$defs/${name}`, ref(id));
    }
    const rewrite = (v: unknown): unknown => {
      if (Array.isArray(v)) return v.map(rewrite);
      if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, k === "$ref" && typeof x === "string" ? (renamed.get(x) ?? x) : rewrite(x)]));
      return v;
    };
    for (const target of new Set(renamed.values())) {
      const id = target.slice(ref("").length);
      const def = this.schemas[id];
      if (def !== undefined) this.schemas[id] = rewrite(def) as Json;
    }
    return rewrite(rest) as Json;
  }
}

interface Names {
  schemas: Map<z.ZodType, string>;
  hoisted: Hoisted;
  taken: (id: string) => boolean;
}

/** A schema used by a route: a $ref when it is a named component, else inline (its named parts by $ref, its repeated unnamed parts hoisted). */
function schemaOf(schema: z.ZodType, names: Names, io: "input" | "output", suffix: string): Json {
  const named = names.schemas.get(schema);
  if (named) return { $ref: ref(`${named}${suffix}`) };
  const registry = z.registry<{ id: string }>();
  for (const [s, id] of names.schemas) if (s !== schema) registry.add(s, { id: `${id}${suffix}` });
  return names.hoisted.hoist(strip(z.toJSONSchema(schema, { io, unrepresentable: "any", metadata: registry }) as Json), names.taken);
}

/** `/v1/sessions/:id/ports/:port/*rest` → `/v1/sessions/{id}/ports/{port}/{rest}`. */
function openApiPath(path: string): string {
  return path.replace(/[:*]([A-Za-z]+)/g, "{$1}");
}

function parameters(route: HttpRoute): Json[] {
  const out: Json[] = [];
  const params = z.toJSONSchema(route.params, { io: "input", unrepresentable: "any" }) as { properties?: Record<string, Json> };
  for (const name of pathParamNames(route.path)) out.push({ name, in: "path", required: true, schema: params.properties?.[name] ?? { type: "string" } });
  const query = z.toJSONSchema(route.query, { io: "input", unrepresentable: "any" }) as { properties?: Record<string, Json>; required?: string[] };
  for (const [name, schema] of Object.entries(query.properties ?? {})) {
    out.push({ name, in: "query", required: (query.required ?? []).includes(name), schema });
  }
  return out;
}

function requestBody(route: HttpRoute, names: Names): Json | undefined {
  const body = route.body;
  if (body.kind === "none") return undefined;
  if (body.kind === "bytes") return { required: true, content: { [body.contentType]: { schema: { type: "string", contentMediaType: body.contentType } } } };
  return { required: !body.optional, content: { "application/json": { schema: schemaOf(body.schema, names, "input", "Input") } } };
}

function responses(route: HttpRoute, names: Names, authenticated: boolean): Json {
  const out: Record<string, { description: string; content?: Record<string, Json> }> = {};
  const add = (status: number, description: string, content?: Record<string, Json>) => {
    const key = String(status);
    const prev = out[key];
    out[key] = { description: prev ? `${prev.description}; ${description}` : description, ...(prev?.content || content ? { content: { ...prev?.content, ...content } } : {}) };
  };
  for (const r of route.responses) {
    for (const status of r.status) {
      if (r.kind === "json") add(status, r.when ?? "the answer", { "application/json": { schema: schemaOf(r.schema, names, "output", "") } });
      else if (r.kind === "ndjson") add(status, `one JSON document per line (${r.when})`, { [NDJSON]: { schema: schemaOf(r.schema, names, "output", "") } });
      else if (r.kind === "bytes") add(status, "raw bytes", { [r.contentType]: { schema: { type: "string", contentMediaType: r.contentType } } });
      else if (r.kind === "empty") add(status, "no content");
      else add(status, "switching to a WebSocket (the terminal protocol, docs/terminal.md)");
    }
  }
  const codes: ErrorCode[] = [...route.errors, "invalid", ...(authenticated ? (["unauthenticated"] as const) : []), "unavailable"];
  for (const code of new Set(codes)) {
    const status = httpStatusOf[code];
    if (out[String(status)]) continue;
    add(status, code, { "application/json": { schema: { $ref: ref("ErrorEnvelope") } } });
  }
  return out;
}

/** The OpenAPI 3.1 document of every route (HttpApi under bearer auth, PublicApi and HealthRoutes without). */
export function openApiDocument(): Json {
  const schemas = namedSchemas();
  const named = { ...components(schemas, "output", ""), ...components(schemas, "input", "Input") };
  const names: Names = { schemas, hoisted: new Hoisted(), taken: (id) => named[id] !== undefined || id === "ErrorEnvelope" };
  const paths: Record<string, Record<string, Json>> = {};
  const entries: Array<[string, HttpRoute, boolean]> = [
    ...(Object.entries(HttpApi) as Array<[string, HttpRoute]>).map(([n, r]) => [n, r, true] as [string, HttpRoute, boolean]),
    ...(Object.entries(PublicApi) as Array<[string, HttpRoute]>).map(([n, r]) => [n, r, false] as [string, HttpRoute, boolean]),
    ...(Object.entries(HealthRoutes) as Array<[string, HttpRoute]>).map(([n, r]) => [n, r, false] as [string, HttpRoute, boolean]),
  ];
  for (const [name, route, authenticated] of entries) {
    const path = openApiPath(route.path);
    const body = requestBody(route, names);
    const params = parameters(route);
    (paths[path] ??= {})[route.method.toLowerCase()] = {
      operationId: name,
      summary: route.summary,
      ...(params.length > 0 ? { parameters: params } : {}),
      ...(body ? { requestBody: body } : {}),
      responses: responses(route, names, authenticated),
      ...(authenticated ? {} : { security: [] }),
    };
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "Paddock",
      version: OPENAPI_API_VERSION,
      description: "The control plane for coding-agent sessions: sessions, environments, runners, exec, files, ports, agents, events. Generated from the HTTP contract (shared/contracts/src/http); docs/api.md is the same contract as prose.",
    },
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    servers: [{ url: "/" }],
    security: [{ bearer: [] }],
    paths,
    components: {
      securitySchemes: { bearer: { type: "http", scheme: "bearer", description: "An API token (paddock token create), or a session's own token ($PADDOCK_TOKEN inside a session)." } },
      schemas: {
        ...named,
        ...names.hoisted.schemas,
        ErrorEnvelope: { type: "object", properties: { error: strip(z.toJSONSchema(ErrorBody) as Json) }, required: ["error"], additionalProperties: false },
      },
    },
  };
}
