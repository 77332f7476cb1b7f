/**
 * Malformed HTTP requests against every route of the gateway (and raw
 * garbage on its socket). A request to a route that changes state always
 * carries at least one defect the API documents as refused (an unknown query
 * parameter, a bad id, a bad token, a body its schema refuses, a wrong
 * method), so any state change it causes is an anomaly, as is any 5xx.
 */
import { Agent, request } from "node:http";
import { connect as tcpConnect } from "node:net";
import { z } from "zod";
import { ARCHIVE_CONTENT_TYPE, HANDOFF_PREFIX, HttpApi, pathParamNames, PublicApi, type HttpRoute, type HttpRouteName, type PublicRouteName } from "@paddock/contracts";
import { countStatus, excerpt, nextInput, type FuzzContext } from "./fuzz-context.ts";
import { badId, badImageBody, encode, nastyString, nulOrDeepBody, randomJson, rawBadSegment, refusedBy, refusedText } from "./fuzz-values.ts";
import type { Prng } from "./prng.ts";

interface BodySpec {
  schema: z.ZodType;
  sample: unknown;
  /** A valid body rich in strings that reach the OS: a NUL goes into one of them (see nulOrDeepBody). */
  osSample?: unknown;
}

const SESSION_OS_SAMPLE = {
  spec: { cmd: ["sh", "-c", "echo hi"], image: "img", egressAllow: ["example.com"], repos: [{ url: "https://example.com/r.git", ref: "main", path: "src" }] },
};
const ENVIRONMENT_OS_SAMPLE = { name: "fuzz", image: "img", setup: "make", init: "true", egressAllow: ["example.com"], connectors: [{ type: "t", raw: { a: "b" } }] };

type RouteName = HttpRouteName | PublicRouteName;

/** A valid body per route (the schema comes from the contract); a route whose schema takes `{}` needs none here. */
const BODY_SAMPLES: Partial<Record<RouteName, Omit<BodySpec, "schema">>> = {
  createSession: { sample: { spec: { cmd: ["true"], ports: [{ port: 8080, public: true }] }, name: "n", oneShot: true, idle: { warmAfterMs: 60_000 }, maxLifetimeMs: 600_000 }, osSample: SESSION_OS_SAMPLE },
  suspendSession: { sample: { warm: true } },
  createAttachTicket: { sample: { mode: "viewer" } },
  createPreviewTicket: { sample: { port: 8080 } },
  createEnvironment: { sample: { name: "fuzz", init: "true", idle: { coldAfterMs: 60_000 }, maxLifetimeMs: 600_000 }, osSample: ENVIRONMENT_OS_SAMPLE },
  updateEnvironment: { sample: { init: "true", idle: {}, maxLifetimeMs: 0 }, osSample: ENVIRONMENT_OS_SAMPLE },
  putSecret: { sample: { value: "v" } },
  createToken: { sample: { label: "x" } },
  exec: { sample: { cmd: ["true"], cwd: "", env: { A: "b" }, stdin: "x", timeoutMs: 1000 } },
  signalProcess: { sample: { signal: "SIGTERM" } },
  declareAgent: { sample: { pid: 1, pidNamespace: "pid:[4026531836]", runtime: "fuzz", model: "m", harnessId: "h", handoffId: "x", tmuxName: "t", version: "1" } },
  resumeAgent: { sample: { pid: 2, model: "m2" } },
  reportTurn: { sample: { event: "start", tokens: 10 } },
  createWebhook: { sample: { url: "http://127.0.0.1:9/fuzz", events: ["session.*"], description: "fuzz" } },
  createWorkspace: { sample: { id: "fuzz-ws", name: "fuzz" } },
  putMember: { sample: { role: "member" } },
  createMemberToken: { sample: { label: "fuzz" } },
  oidcRedeem: { sample: { handoff: `${HANDOFF_PREFIX}${"A".repeat(43)}` } },
  oidcExchange: { sample: { idToken: "eyJhbGciOiJSUzI1NiJ9.e30.c2ln", workspaceId: "default" } },
  createJoinToken: { sample: { poolId: "default", ttlMs: 60_000 } },
  joinRunner: { sample: { joinToken: `pdj_${"A".repeat(43)}`, publicKey: `U${"A".repeat(55)}`, runnerId: "fuzz-runner" } },
};

/** Plausible (and a few refused) values of each query parameter the contract names. */
const QUERY_VALUES: Record<string, string[]> = {
  limit: ["1", "500", "0", "-1", "abc"],
  cursor: ["x"],
  includeTerminal: ["true", "maybe"],
  parentId: ["x"],
  creatorId: ["dev", "../x", "x".repeat(65)],
  app: ["main", "nope"],
  since: ["0", "5", "-1", "x", "now", "NOW"],
  startTime: ["0", "1700000000000", "-1", "x", "1e12"],
  path: ["", "a", "../x", "/etc"],
  sessionId: ["x"],
  follow: ["true", "false", "yes"],
  wait: ["running", "destroyed", "queued", "sleeping", "RUNNING", ""],
  waitFor: ["running", "suspended_cold", "failed", "nope", ""],
  timeoutMs: ["0", "25", "-1", "1.5", "300001", "x"],
  depth: ["1", "3", "0", "65", "x"],
  eof: ["true", "false", "maybe"],
  encoding: ["utf8", "base64", "hex", ""],
  pid: ["1", "2", "0", "-1", "4194305", "x"],
  pidNamespace: ["4026531836", "pid:[4026531836]", "pid:[x]", "0", ""],
  turn: ["1", "2", "0", "x"],
};

/** GETs that still change state: a workspace pull records a transfer in the audit; a sign-in start stores its login, its callback spends it. */
const MUTATING_GETS: ReadonlySet<RouteName> = new Set(["pullWorkspace", "oidcLogin", "oidcCallback"]);

interface RouteSpec {
  name: RouteName;
  /** A route without a token (single sign-on): an Authorization header is ignored, so a bad one is no defect. */
  public: boolean;
  method: string;
  path: string;
  /** Whether a valid call changes state (then every generated call carries a refused defect). */
  mutates: boolean;
  body?: BodySpec;
  /** An archive upload: any random body is malformed. */
  archive?: boolean;
  /** A raw file upload: any body is a file, so no body is a defect (the call carries another). */
  rawBytes?: boolean;
  /** Known query parameters and plausible values. */
  query: Record<string, string[]>;
}

function specOf(name: RouteName, r: HttpRoute, isPublic = false): RouteSpec {
  const keys = Object.keys((z.toJSONSchema(r.query, { io: "input", unrepresentable: "any" }) as { properties?: object }).properties ?? {});
  const query = Object.fromEntries(keys.map((k) => [k, QUERY_VALUES[k] ?? ["x"]]));
  const spec: RouteSpec = { name, public: isPublic, method: r.method, path: r.path, mutates: r.method !== "GET" || MUTATING_GETS.has(name), query };
  if (r.body.kind === "bytes" && r.body.contentType === ARCHIVE_CONTENT_TYPE) spec.archive = true;
  else if (r.body.kind === "bytes") spec.rawBytes = true;
  if (r.body.kind === "json") {
    const samples = BODY_SAMPLES[name] ?? { sample: {} };
    if (!r.body.schema.safeParse(samples.sample).success) throw new Error(`fuzz-http: the sample body of ${name} is refused by its contract`);
    spec.body = { schema: r.body.schema, ...samples };
  }
  return spec;
}

/**
 * Every HTTP route of the contract (the terminal upgrade is fuzz-ws's), those
 * without a token included: the gateway serves exactly these, so nothing it
 * serves goes unfuzzed.
 */
export const HTTP_ROUTES: RouteSpec[] = [
  ...(Object.entries(HttpApi) as Array<[HttpRouteName, HttpRoute]>).filter(([, r]) => !r.responses.some((x) => x.kind === "websocket")).map(([name, r]) => specOf(name, r)),
  ...(Object.entries(PublicApi) as Array<[PublicRouteName, HttpRoute]>).map(([name, r]) => specOf(name, r, true)),
];

type Defect = "query" | "auth" | "id" | "body" | "method";

/** One generated request. */
interface Req {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
  follow: boolean;
}

/** A value for a path parameter: an existing record's id (or a plausible absent one) of the route's resource. */
function paramValue(ctx: FuzzContext, p: Prng, route: RouteSpec, name: string): string {
  const f = ctx.fixtures;
  if (name === "app") return p.pick(["main", "nope"]);
  const resource = route.path.split("/")[2] ?? "";
  const valid: Record<string, string[]> = {
    sessions: [f.running.id, f.dead.id, `ses_${p.string(20)}`],
    environments: [f.environmentId, `env_${p.string(20)}`],
    runners: [...ctx.stack.runnerIds, "nope"],
    secrets: [f.secretName, "NOPE"],
    tokens: [f.tokenId, `tok_${p.string(20)}`],
    webhooks: [f.webhookId, `wh_${p.string(20)}`],
  };
  if (name === "agentId") return p.pick([...f.agentIds, `agt_${p.string(20)}`]);
  if (name === "ws") return p.pick(["default", "fleet", `ws_${p.string(20)}`]);
  if (name === "actorId") return p.pick(["dev", `actor_${p.string(20)}`]);
  return p.pick(valid[resource] ?? ["x"]);
}

function generate(ctx: FuzzContext, p: Prng, route: RouteSpec): { req: Req; defects: Defect[] } {
  const params = pathParamNames(route.path);
  const possible: Defect[] = ["query", ...(route.public ? [] : (["auth"] as const)), "method", ...(params.length > 0 ? (["id"] as const) : []), ...(route.body || route.archive ? (["body"] as const) : [])];
  const defects = new Set<Defect>();
  for (const d of possible) if (p.bool(0.3)) defects.add(d);
  if (route.mutates && defects.size === 0) defects.add(p.pick(possible));

  const badParam = defects.has("id") ? p.pick(params) : undefined;
  let path = route.path;
  for (const name of params) {
    const value = name === badParam ? badId(p) : paramValue(ctx, p, route, name);
    // Mostly percent-encoded; a bad id is sometimes sent raw (printable ASCII only, still not an id).
    path = path.replace(`:${name}`, p.bool(0.8) || name !== badParam ? encode(value) : rawBadSegment(value));
  }
  const query: string[] = [];
  for (const [k, values] of Object.entries(route.query)) if (p.bool(0.3)) query.push(`${k}=${encode(p.bool(0.7) ? p.pick(values) : nastyString(p))}`);
  if (defects.has("query")) {
    const known = Object.keys(route.query);
    if (known.length > 0 && p.bool(0.3)) query.push(`${p.pick(known)}=1`, `${p.pick(known)}=1`, `zz${p.string(4)}=1`);
    else query.push(`${p.pick(["zz", "token", "access_token", "__proto__", "x", "Limit"])}${p.string(p.int(0, 4))}=${encode(nastyString(p))}`);
  }
  // A wait is bounded by a timeoutMs of its own: one left to DEFAULT_WAIT_MS would outlast this client's 15 s.
  // An agent's wait route waits with no parameter at all.
  const waits = route.name === "waitAgent" || query.some((q) => /^(wait|waitFor)=/.test(q));
  if (waits && !query.some((q) => q.startsWith("timeoutMs="))) query.push("timeoutMs=25");
  const follow = query.some((q) => q === "follow=true");
  if (query.length > 0) path += `?${query.join("&")}`;

  const headers: Record<string, string> = {};
  if (defects.has("auth")) {
    const a = p.int(0, 6);
    const value = [
      undefined,
      `Bearer ${p.string(p.int(0, 60))}`,
      `Basic ${Buffer.from("dev:dev").toString("base64")}`,
      `Bearer pdk_${p.string(43)}`,
      `Bearer ${ctx.stack.token}x`,
      `Bearer  ${ctx.stack.token} ${ctx.stack.token}`,
      `Bearer ${"A".repeat(p.pick([300, 9000]))}`,
    ][a];
    if (value !== undefined) headers.authorization = value;
  } else {
    headers.authorization = `Bearer ${ctx.stack.token}`;
  }
  if (p.bool(0.1)) headers.origin = p.pick(["http://evil.example", "null", nastyString(p).replace(/[^\x20-\x7e]/g, "")]);

  let body: Buffer | undefined;
  if (route.rawBytes) {
    if (p.bool(0.7)) body = p.bytes(p.int(0, 3000));
  } else if (route.archive) {
    if (defects.has("body") || p.bool(0.5)) body = p.bool(0.5) ? p.bytes(p.int(0, 3000)) : Buffer.concat([Buffer.from([0x1f, 0x8b, 0x08, 0]), p.bytes(p.int(0, 500))]);
  } else if (route.body) {
    if (defects.has("body") && route.body.osSample !== undefined && p.bool(0.3)) {
      // Every osSample names an image: half the time it is a reference the contract's grammar refuses.
      body = Buffer.from(p.bool(0.5) ? badImageBody(p, route.body.osSample) : nulOrDeepBody(p, route.body.osSample));
    } else if (defects.has("body")) {
      body = p.bool(0.6)
        ? Buffer.from(JSON.stringify(refusedBy(p, route.body.schema, route.body.sample)) ?? "null")
        : Buffer.from(refusedText(p, route.body.schema, route.body.sample), "latin1");
    } else if (p.bool(0.7)) {
      body = Buffer.from(JSON.stringify(p.bool(0.5) ? route.body.sample : randomJson(p)) ?? "null");
    }
  } else if (p.bool(0.2)) {
    body = Buffer.from(JSON.stringify(randomJson(p)) ?? "null");
  }
  if (body && p.bool(0.03)) body = Buffer.concat([body, Buffer.alloc(1024 * 1024 + 1, 0x20)]);
  if (body) headers["content-type"] = p.bool(0.9) ? "application/json" : p.pick(["text/plain", "application/x-www-form-urlencoded", "application/json; charset=utf-16", ""]);

  let method = route.method;
  if (defects.has("method")) {
    // Only a method no route serves on this path (405): another route's method would be a valid call.
    const served = new Set(HTTP_ROUTES.filter((r) => r.path === route.path).map((r) => r.method));
    method = p.pick(["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"].filter((m) => !served.has(m)));
  }
  return { req: { method, path, headers, ...(body ? { body } : {}), follow }, defects: [...defects] };
}

const agent = new Agent({ keepAlive: true, maxSockets: 8 });

/** Sends one request; resolves with the status (0: no answer) and the start of the body. */
function send(base: string, r: Req, timeoutMs: number): Promise<{ status: number; body: string; error?: string }> {
  const url = new URL(base);
  return new Promise((resolve) => {
    let settled = false;
    const done = (v: { status: number; body: string; error?: string }) => {
      if (!settled) {
        settled = true;
        resolve(v);
      }
    };
    let req: ReturnType<typeof request>;
    try {
      req = request({ host: url.hostname, port: url.port, method: r.method, path: r.path, headers: r.headers, agent }, (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (c: Buffer) => {
          if (size < 2048) chunks.push(c);
          size += c.length;
          // A follow stream never ends by itself: its 200 and first bytes are the answer.
          if (r.follow) {
            res.destroy();
            done({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") });
          }
        });
        res.on("end", () => done({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8").slice(0, 300) }));
        res.on("error", () => done({ status: res.statusCode ?? 0, body: "" }));
        res.on("close", () => done({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8").slice(0, 300) }));
        if (r.follow && res.statusCode === 200) setTimeout(() => res.destroy(), 300);
      });
    } catch (err) {
      done({ status: -1, body: "", error: err instanceof Error ? err.message : String(err) });
      return;
    }
    req.setTimeout(timeoutMs, () => {
      req.destroy();
      done({ status: 0, body: "", error: "timeout" });
    });
    req.on("error", (err) => done({ status: 0, body: "", error: err.message }));
    req.end(r.body);
  });
}

/** Raw bytes on the HTTP port: broken request lines, headers, framing. */
const RAW = [
  "GARBAGE\r\n\r\n",
  "GET /v1/sessions HTTP/9.9\r\nHost: x\r\n\r\n",
  "GET /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
  "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
  "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
  "GET /v1/sessions HTTP/1.1\r\nHost: x\r\nX: " + "a".repeat(100_000) + "\r\n\r\n",
  "GET /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \u0000\u0001\r\n\r\n",
  "GET \u0000 HTTP/1.1\r\n\r\n",
  "\u0016\u0003\u0001\u0000\u00a5\u0001\u0000\u0000\u00a1\u0003\u0003",
  "GET /v1/sessions/%ZZ HTTP/1.1\r\nHost: x\r\n\r\n",
];

function sendRaw(base: string, bytes: Buffer, timeoutMs: number): Promise<number> {
  const url = new URL(base);
  return new Promise((resolve) => {
    const sock = tcpConnect(Number(url.port), url.hostname);
    let got = "";
    const finish = () => {
      sock.destroy();
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(got);
      resolve(m ? Number(m[1]) : 0);
    };
    sock.setTimeout(timeoutMs, finish);
    sock.on("data", (d: Buffer) => {
      got += d.toString("latin1");
      if (got.includes("\r\n")) finish();
    });
    sock.on("error", finish);
    sock.on("close", finish);
    sock.write(bytes);
  });
}

/** Sends `count` generated requests, `concurrency` at a time. */
export async function fuzzHttp(ctx: FuzzContext, count: number, p: Prng): Promise<void> {
  const routes = HTTP_ROUTES;
  let left = count;
  const worker = async (wp: Prng) => {
    while (left > 0) {
      left -= 1;
      if (wp.bool(0.04)) {
        const raw = Buffer.from(wp.pick(RAW), "latin1");
        const n = nextInput(ctx, "http raw");
        const status = await sendRaw(ctx.stack.url, raw, 3_000);
        if (status > 0) countStatus(ctx, status);
        if (status >= 500) ctx.anomalies.add("5xx answers", `input #${n} raw ${excerpt(raw)} → ${status}`);
        continue;
      }
      const route = wp.pick(routes);
      const { req, defects } = generate(ctx, wp, route);
      const n = nextInput(ctx, "http");
      const res = await send(ctx.stack.url, req, 15_000);
      const what = `input #${n} ${req.method} ${excerpt(req.path, 120)} [${defects.join(",") || "none"}] body ${excerpt(req.body ?? "", 80)}`;
      if (res.status === -1) continue; // the client library refused to send it: not an input
      if (res.status === 0) {
        // A reset after a refused oversize body is the documented answer; silence is not.
        if (!req.follow && res.error === "timeout") ctx.anomalies.add("requests never answered", what);
        continue;
      }
      countStatus(ctx, res.status);
      if (res.status >= 500) ctx.anomalies.add("5xx answers", `${what} → ${res.status} ${excerpt(res.body, 120)}`);
      // Every defect is one the API documents as refused: success means it was not checked.
      if (defects.length > 0 && res.status >= 200 && res.status < 300) ctx.anomalies.add("malformed requests accepted", `${what} → ${res.status}`);
    }
  };
  await Promise.all(Array.from({ length: 4 }, () => worker(p.fork())));
}
