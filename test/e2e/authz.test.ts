/**
 * The Authorizer matrix (issue 7, item 2) through the real stack: every HTTP
 * route under /v1 and the terminal WebSocket (viewer and controller), walked
 * for each principal — the owner (creator of the resources), another member of
 * the workspace, a workspace admin, a member and an admin of ANOTHER workspace,
 * a fleet operator, a revoked token of the owner, and no token — against a table written from
 * the policy (ARCHITECTURE.md, services/gateway/README.md):
 *   members read; the creator or an admin control; admins alone update/delete
 *   environments; only a fleet operator (an admin of the reserved workspace
 *   `fleet`, here a plain member of another workspace) changes runner state,
 *   not any workspace's admin; another workspace's resource is always 404, never 403, and its
 *   404 is byte-for-byte the 404 of an id that does not exist; a revoked,
 *   expired or missing token is 401, always with the same body.
 * The single sign-on routes (issue 28 item 8) take no token: each answers
 * every principal byte for byte the same.
 * Also walked (issue 21, items 7 and 13): a session's own service token (of
 * another session of `default`) and a token whose membership was removed —
 * neither may see `default`'s resources, so each existing one is the 404 of
 * one that does not exist — and creating an environment that references
 * secrets, which only a workspace's admin may do.
 * Cells that change a resource run against a fresh one (made by the owner just
 * for that cell), so the walk does not depend on order; runner state changes
 * come last (each allowed principal drains, cordons and uncordons, leaving the
 * runner active). Also checked: another workspace's list endpoints, cursors and
 * error bodies never carry the owner's ids.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { packDirectory } from "@paddock/archive";
import { FLEET_WORKSPACE, type Session } from "@paddock/contracts";
import { seedMember, seedToken } from "@paddock/gateway/auth";
import { startStack, untilSession, type Stack } from "@paddock/testing";
import { api, sessionOf, type ApiAnswer } from "./helpers.ts";
import { openTerminal } from "./authz-helpers.ts";

const WS = "default";
const OTHER_WS = "other";
const P = ["owner", "peer", "admin", "stranger", "strangerAdmin", "operator", "session", "exMember", "revoked", "expired", "none"] as const;
type Principal = (typeof P)[number];
const TOKENS: Record<Exclude<Principal, "revoked" | "none">, string> = {
  session: "pdk_authz_session_service_00000000007",
  exMember: "pdk_authz_removed_member_rex_000008",
  expired: "pdk_authz_expired_eli_00000000000009",
  owner: "pdk_authz_owner_oscar_000000000001",
  peer: "pdk_authz_peer_mia_00000000000000002",
  admin: "pdk_authz_admin_ada_0000000000000003",
  stranger: "pdk_authz_stranger_olga_00000000004",
  strangerAdmin: "pdk_authz_stranger_admin_otto_00005",
  operator: "pdk_authz_fleet_operator_fred_00006",
};
/** Principals of another workspace: everything of `default` is 404 to them. */
const FOREIGN: ReadonlySet<Principal> = new Set(["stranger", "strangerAdmin", "operator"]);
/** Principals of `default` that may not see its resources: a session's own token (of another session), a removed member. */
const BLIND: ReadonlySet<Principal> = new Set(["session", "exMember"]);
/** The one body of every token failure (no oracle on which). */
const UNAUTHENTICATED = { error: { code: "unauthenticated", message: "missing or invalid token" } };
/** Ids of the owner's side that must never reach another workspace. */
const OWNER_ACTORS = ["oscar-owner", "mia-peer", "ada-admin"];

let stack: Stack;
let nc: NatsConnection;
let scratch: string;
let archive: Buffer;
let revokedToken: string;
/** The shared resources, created by the owner before the matrix. */
let session: Session;
let envId: string;
let env2Id: string;
let ownerTokenId: string;
/** Every id of workspace `default` that this file created (the leak checks look for them). */
const ownerIds = new Set<string>();

function tokenOf(p: Principal): string | undefined {
  if (p === "none") return undefined;
  if (p === "revoked") return revokedToken;
  return TOKENS[p];
}

const call = (p: Principal, method: string, path: string, body?: unknown, raw?: string): Promise<ApiAnswer> =>
  api(stack.url, tokenOf(p), method, path, body, raw);

async function putArchive(p: Principal, sessionId: string): Promise<ApiAnswer> {
  const headers: Record<string, string> = { "content-type": "application/gzip" };
  const t = tokenOf(p);
  if (t !== undefined) headers.authorization = `Bearer ${t}`;
  const res = await fetch(`${stack.url}/v1/sessions/${sessionId}/workspace?path=authz`, { method: "PUT", headers, body: archive });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: res.status, body };
}

/** Resolves with the first revision of a session record matching pred (a KV watch, no polling). */
function untilRecord(id: string, pred: (s: Session) => boolean): Promise<Session> {
  return untilSession(nc, id, pred);
}

/** A fresh running session of the owner (one per destructive cell). */
async function freshSession(): Promise<Session> {
  const res = await call("owner", "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "echo ready; exec sleep 600"] } });
  expect(res.status).toBe(201);
  const s = sessionOf(res);
  ownerIds.add(s.id);
  return untilRecord(s.id, (x) => x.state === "running" && x.pending === undefined);
}

async function freshSuspended(): Promise<Session> {
  const s = await freshSession();
  expect((await call("owner", "POST", `/v1/sessions/${s.id}/suspend`, { warm: true })).status).toBe(200);
  return untilRecord(s.id, (x) => x.state === "suspended_warm" && x.pending === undefined);
}

async function freshEnvironment(): Promise<string> {
  const res = await call("owner", "POST", "/v1/environments", { name: `fresh-${Math.random().toString(36).slice(2)}` });
  expect(res.status).toBe(201);
  const id = (res.body as { id: string }).id;
  ownerIds.add(id);
  return id;
}

async function freshOwnerToken(): Promise<string> {
  const res = await call("owner", "POST", "/v1/tokens", { label: "authz-fresh" });
  expect(res.status).toBe(201);
  const id = (res.body as { id: string }).id;
  ownerIds.add(id);
  return id;
}

/** Removes what a cell made (the dev token is an admin of `default`). */
async function cleanup(ids: string[]): Promise<void> {
  for (const id of ids) {
    const r = await api(stack.url, stack.token, "DELETE", `/v1/sessions/${id}`);
    expect(r.status).toBe(200);
  }
}

// ---------------------------------------------------------------------------
// The policy, as a table.

type Kind =
  /** A workspace-level read or create: anyone authenticated, on its own workspace. */
  | "workspace"
  /** Read a resource of `default`: its members; another workspace: 404. */
  | "read"
  /** Act on a session/token of `default`: creator or admin; a plain member 403; another workspace 404. */
  | "control"
  /** Environment update/delete: admins of `default` only. */
  | "admin"
  /** Runner reads: every member of any workspace (runners are the fleet's). */
  | "fleetRead"
  /** Runner state: a fleet operator (an admin of the reserved workspace `fleet`) only. */
  | "fleetAdmin"
  /** A workspace-level create only an admin of the caller's own workspace makes (an environment referencing secrets). */
  | "workspaceAdmin";

function expected(kind: Kind, p: Principal, ok: number, sessionOk = false): number {
  if (p === "revoked" || p === "expired" || p === "none") return 401;
  if (BLIND.has(p)) {
    // Workspace-level: refused (a session's token only creates and lists sessions, its children); anything in it: not found.
    if (kind === "workspace" || kind === "fleetRead" || kind === "fleetAdmin" || kind === "workspaceAdmin") return p === "session" && sessionOk ? ok : 403;
    return 404;
  }
  const foreign = FOREIGN.has(p);
  switch (kind) {
    case "workspaceAdmin":
      return p === "admin" || p === "strangerAdmin" ? ok : 403;
    case "workspace":
    case "fleetRead":
      return ok;
    case "read":
      return foreign ? 404 : ok;
    case "control":
      return foreign ? 404 : p === "peer" ? 403 : ok;
    case "admin":
      return foreign ? 404 : p === "admin" ? ok : 403;
    case "fleetAdmin":
      return p === "operator" ? ok : 403;
  }
}

interface Cell {
  /** The answer; `probe` (for 404 cells) is the same request against an id that does not exist. */
  run: (p: Principal) => Promise<{ answer: ApiAnswer; realId?: string; probe?: (fakeId: string) => Promise<ApiAnswer> }>;
}

interface RouteCase extends Cell {
  name: string;
  kind: Kind;
  ok: number;
  /** A session's own token may do this (create a session: its child). */
  sessionOk?: boolean;
  /** The answer per principal when the route's policy is not one of the kinds (workspace administration). */
  expect?: (p: Principal) => number;
}

/**
 * Administration of workspace `default` (its webhooks, its members): its
 * admin, and for members a fleet operator; any other principal of `default`
 * is refused (403), another workspace's principal finds nothing (404) — an
 * admin of its own workspace included.
 */
function administration(ok: number, operatorOk: boolean): (p: Principal) => number {
  return (p) => {
    if (p === "revoked" || p === "expired" || p === "none") return 401;
    if (p === "admin" || (p === "operator" && operatorOk)) return ok;
    // Webhooks are an admin's of its own workspace: anyone else is refused before any lookup (the same 403 for any id).
    if (p === "strangerAdmin" || (operatorOk && p === "stranger")) return 404;
    return 403;
  };
}

/** A member of `default` made for one cell (by the dev token, an admin of it). */
async function freshMember(): Promise<string> {
  const actorId = `fresh-member-${++counter}`;
  expect((await api(stack.url, stack.token, "PUT", `/v1/workspaces/${WS}/members/${actorId}`, { role: "member" })).status).toBe(200);
  return actorId;
}

/** A webhook of `default` made for one cell (an event no test here causes, so nothing is delivered). */
async function freshWebhook(): Promise<string> {
  const res = await api(stack.url, stack.token, "POST", "/v1/webhooks", { url: "https://93.184.215.14/authz", events: ["runner.fence"] });
  expect(res.status).toBe(201);
  return (res.body as { id: string }).id;
}

/** Runs a request on a fresh resource when this principal is allowed to change it, else on the shared one. */
function onSession(
  kind: Kind,
  fresh: (() => Promise<Session>) | undefined,
  request: (p: Principal, id: string) => Promise<ApiAnswer>,
  after?: (answer: ApiAnswer) => string[],
): Cell["run"] {
  return async (p) => {
    const allowed = expected(kind, p, 200) === 200;
    if (allowed && fresh) {
      const s = await fresh();
      const answer = await request(p, s.id);
      await cleanup([s.id, ...(after?.(answer) ?? [])]);
      return { answer };
    }
    return { answer: await request(p, session.id), realId: session.id, probe: (fake) => request(p, fake) };
  };
}

const sessionCase = (
  name: string,
  kind: Kind,
  ok: number,
  request: (p: Principal, id: string) => Promise<ApiAnswer>,
  fresh?: () => Promise<Session>,
  after?: (answer: ApiAnswer) => string[],
): RouteCase => ({ name, kind, ok, run: onSession(kind, fresh, request, after) });

const terminalCell = (mode: "viewer" | "controller") => async (p: Principal, id: string) => {
  const r = await openTerminal(stack.url, tokenOf(p), id, `mode=${mode}`);
  if ("hello" in r) {
    expect(r.hello).toMatchObject({ type: "hello", sessionId: id, mode });
    return { status: 101, body: r.hello };
  }
  return { status: r.status, body: r.body };
};

let counter = 0;
const uniq = (p: Principal) => `${p}-${++counter}`;

const ROUTES: RouteCase[] = [
  // Sessions
  {
    name: "GET /v1/sessions",
    kind: "workspace",
    ok: 200,
    // A session's token lists the sessions it created (issue 26, item 6): never one of the owner's.
    sessionOk: true,
    run: async (p) => {
      const answer = await call(p, "GET", "/v1/sessions?includeTerminal=true");
      if (p === "session") expect((answer.body as { sessions: Session[] }).sessions.filter((s) => ownerIds.has(s.id))).toEqual([]);
      return { answer };
    },
  },
  {
    name: "POST /v1/sessions",
    kind: "workspace",
    ok: 201,
    sessionOk: true,
    run: async (p) => {
      const answer = await call(p, "POST", "/v1/sessions", { spec: { cmd: ["true"] }, oneShot: true });
      return { answer };
    },
  },
  sessionCase("GET /v1/sessions/:id", "read", 200, (p, id) => call(p, "GET", `/v1/sessions/${id}`)),
  sessionCase("DELETE /v1/sessions/:id", "control", 200, (p, id) => call(p, "DELETE", `/v1/sessions/${id}`), freshSession),
  sessionCase("POST /v1/sessions/:id/suspend", "control", 200, (p, id) => call(p, "POST", `/v1/sessions/${id}/suspend`, { warm: true }), freshSession),
  sessionCase("POST /v1/sessions/:id/resume", "control", 200, (p, id) => call(p, "POST", `/v1/sessions/${id}/resume`, {}), freshSuspended),
  sessionCase("POST /v1/sessions/:id/snapshot", "control", 200, (p, id) => call(p, "POST", `/v1/sessions/${id}/snapshot`, {}), freshSession),
  sessionCase(
    "POST /v1/sessions/:id/recycle",
    "control",
    201,
    (p, id) => call(p, "POST", `/v1/sessions/${id}/recycle`, {}),
    freshSession,
    (a) => {
      const next = (a.body as { session?: { id: string } }).session?.id;
      if (next) ownerIds.add(next);
      return next ? [next] : [];
    },
  ),
  sessionCase("POST /v1/sessions/:id/apps/main/restart", "control", 200, (p, id) => call(p, "POST", `/v1/sessions/${id}/apps/main/restart`, {}), freshSession),
  sessionCase("POST /v1/sessions/:id/attach-ticket (viewer)", "read", 201, (p, id) => call(p, "POST", `/v1/sessions/${id}/attach-ticket`, { mode: "viewer" })),
  sessionCase("POST /v1/sessions/:id/attach-ticket (controller)", "control", 201, (p, id) => call(p, "POST", `/v1/sessions/${id}/attach-ticket`, { mode: "controller" })),
  sessionCase("GET /v1/sessions/:id/log", "read", 200, (p, id) => call(p, "GET", `/v1/sessions/${id}/log`)),
  sessionCase("GET /v1/sessions/:id/diff", "read", 200, (p, id) => call(p, "GET", `/v1/sessions/${id}/diff`)),
  sessionCase("GET /v1/sessions/:id/repos", "read", 200, (p, id) => call(p, "GET", `/v1/sessions/${id}/repos`)),
  sessionCase("GET /v1/sessions/:id/workspace", "read", 200, (p, id) => call(p, "GET", `/v1/sessions/${id}/workspace`)),
  sessionCase("PUT /v1/sessions/:id/workspace", "control", 200, (p, id) => putArchive(p, id), freshSession),
  sessionCase("WS /v1/sessions/:id/terminal (viewer)", "read", 101, terminalCell("viewer")),
  sessionCase("WS /v1/sessions/:id/terminal (controller)", "control", 101, terminalCell("controller")),
  // Events
  { name: "GET /v1/events", kind: "workspace", ok: 200, run: async (p) => ({ answer: await call(p, "GET", "/v1/events?limit=500") }) },
  sessionCase("GET /v1/events?sessionId=", "read", 200, (p, id) => call(p, "GET", `/v1/events?sessionId=${id}`)),
  // Environments
  { name: "POST /v1/environments", kind: "workspace", ok: 201, run: async (p) => ({ answer: await call(p, "POST", "/v1/environments", { name: `env-${uniq(p)}` }) }) },
  {
    name: "POST /v1/environments (secretRefs)",
    kind: "workspaceAdmin",
    ok: 201,
    run: async (p) => ({ answer: await call(p, "POST", "/v1/environments", { name: `env-secret-${uniq(p)}`, secretRefs: ["AUTHZ_SECRET"] }) }),
  },
  { name: "GET /v1/environments", kind: "workspace", ok: 200, run: async (p) => ({ answer: await call(p, "GET", "/v1/environments?limit=500") }) },
  {
    name: "GET /v1/environments/:id",
    kind: "read",
    ok: 200,
    run: async (p) => ({ answer: await call(p, "GET", `/v1/environments/${envId}`), realId: envId, probe: (fake) => call(p, "GET", `/v1/environments/${fake}`) }),
  },
  {
    name: "PATCH /v1/environments/:id",
    kind: "admin",
    ok: 200,
    run: async (p) => {
      const req = (id: string) => call(p, "PATCH", `/v1/environments/${id}`, { init: `echo ${p}` });
      if (expected("admin", p, 200) === 200) return { answer: await req(await freshEnvironment()) };
      return { answer: await req(envId), realId: envId, probe: req };
    },
  },
  {
    name: "DELETE /v1/environments/:id",
    kind: "admin",
    ok: 200,
    run: async (p) => {
      const req = (id: string) => call(p, "DELETE", `/v1/environments/${id}`);
      if (expected("admin", p, 200) === 200) return { answer: await req(await freshEnvironment()) };
      return { answer: await req(envId), realId: envId, probe: req };
    },
  },
  // Runners (reads; state changes are the last describe)
  { name: "GET /v1/runners", kind: "fleetRead", ok: 200, run: async (p) => ({ answer: await call(p, "GET", "/v1/runners") }) },
  { name: "GET /v1/runners/:id", kind: "fleetRead", ok: 200, run: async (p) => ({ answer: await call(p, "GET", "/v1/runners/runner-1") }) },
  // Runner joins are off on this stack (no callout issuer): past authorization a fleet operator gets not_found (test/e2e/runner-join.test.ts runs them).
  { name: "POST /v1/runners/join-tokens", kind: "fleetAdmin", ok: 404, run: async (p) => ({ answer: await call(p, "POST", "/v1/runners/join-tokens", { poolId: "default" }) }) },
  { name: "POST /v1/runners/:id/revoke", kind: "fleetAdmin", ok: 404, run: async (p) => ({ answer: await call(p, "POST", "/v1/runners/runner-1/revoke", {}) }) },
  // Tokens
  { name: "POST /v1/tokens", kind: "workspace", ok: 201, run: async (p) => ({ answer: await call(p, "POST", "/v1/tokens", { label: uniq(p) }) }) },
  { name: "GET /v1/tokens", kind: "workspace", ok: 200, run: async (p) => ({ answer: await call(p, "GET", "/v1/tokens") }) },
  {
    name: "DELETE /v1/tokens/:id",
    kind: "control",
    ok: 200,
    run: async (p) => {
      const req = (id: string) => call(p, "DELETE", `/v1/tokens/${id}`);
      if (expected("control", p, 200) === 200) return { answer: await req(await freshOwnerToken()) };
      return { answer: await req(ownerTokenId), realId: ownerTokenId, probe: req };
    },
  },
  // Webhooks: the workspace's admins only.
  {
    name: "POST /v1/webhooks",
    kind: "workspaceAdmin",
    ok: 201,
    run: async (p) => {
      const answer = await call(p, "POST", "/v1/webhooks", { url: "https://93.184.215.14/authz", events: ["runner.fence"] });
      const id = (answer.body as { id?: string }).id;
      if (answer.status === 201 && id) expect((await call(p, "DELETE", `/v1/webhooks/${id}`)).status).toBe(200);
      return { answer };
    },
  },
  { name: "GET /v1/webhooks", kind: "workspaceAdmin", ok: 200, run: async (p) => ({ answer: await call(p, "GET", "/v1/webhooks") }) },
  {
    name: "DELETE /v1/webhooks/:id",
    kind: "admin",
    ok: 200,
    expect: administration(200, false),
    run: async (p) => {
      const id = await freshWebhook();
      const req = (hook: string) => call(p, "DELETE", `/v1/webhooks/${hook}`);
      const answer = await req(id);
      if (answer.status !== 200) await api(stack.url, stack.token, "DELETE", `/v1/webhooks/${id}`);
      return { answer, realId: id, probe: req };
    },
  },
  {
    name: "GET /v1/webhooks/:id/deliveries",
    kind: "admin",
    ok: 200,
    expect: administration(200, false),
    run: async (p) => {
      const id = await freshWebhook();
      const req = (hook: string) => call(p, "GET", `/v1/webhooks/${hook}/deliveries`);
      const answer = await req(id);
      await api(stack.url, stack.token, "DELETE", `/v1/webhooks/${id}`);
      return { answer, realId: id, probe: req };
    },
  },
  // Workspaces and members: fleet operators create workspaces; a workspace's admins (or an operator) manage it.
  { name: "POST /v1/workspaces", kind: "fleetAdmin", ok: 201, run: async (p) => ({ answer: await call(p, "POST", "/v1/workspaces", { id: `ws-${uniq(p)}` }) }) },
  { name: "GET /v1/workspaces/:ws/members", kind: "admin", ok: 200, expect: administration(200, true), run: async (p) => ({ answer: await call(p, "GET", `/v1/workspaces/${WS}/members`) }) },
  {
    name: "PUT /v1/workspaces/:ws/members/:actorId",
    kind: "admin",
    ok: 200,
    expect: administration(200, true),
    run: async (p) => ({ answer: await call(p, "PUT", `/v1/workspaces/${WS}/members/${await freshMember()}`, { role: "member" }) }),
  },
  {
    name: "DELETE /v1/workspaces/:ws/members/:actorId",
    kind: "admin",
    ok: 200,
    expect: administration(200, true),
    run: async (p) => ({ answer: await call(p, "DELETE", `/v1/workspaces/${WS}/members/${await freshMember()}`) }),
  },
  {
    name: "POST /v1/workspaces/:ws/members/:actorId/tokens",
    kind: "admin",
    ok: 201,
    expect: administration(201, true),
    run: async (p) => ({ answer: await call(p, "POST", `/v1/workspaces/${WS}/members/${await freshMember()}/tokens`, { label: uniq(p) }) }),
  },
];

/** An id of the same shape as `real` that names nothing. */
function fakeOf(real: string): string {
  return real.slice(0, -6) + "zzzzzz";
}

/** The whole matrix as "route principal → got/expected" (printed for the report). */
const matrix: Array<Record<string, string>> = [];

/** Remembers the ids of every record of `default` an answer shows. */
function collectIds(body: unknown): void {
  if (typeof body !== "object" || body === null) return;
  const b = body as { id?: unknown; workspaceId?: unknown; session?: unknown };
  if (typeof b.id === "string" && b.workspaceId === WS) ownerIds.add(b.id);
  collectIds(b.session);
}

function assertNoLeak(p: Principal, route: string, body: unknown): void {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  for (const id of [...ownerIds, ...OWNER_ACTORS]) {
    expect(text.includes(id), `${route} as ${p} leaked ${id}: ${text.slice(0, 300)}`).toBe(false);
  }
}

beforeAll(async () => {
  stack = await startStack({ runnerCapacity: 64 });
  nc = await connect({ servers: stack.nats.url });
  const seed = async (p: keyof typeof TOKENS, workspaceId: string, actorId: string, role: "member" | "admin") => {
    await seedToken(nc, TOKENS[p], { workspaceId, actor: { id: actorId, kind: "user" }, createdAt: 1 });
    await seedMember(nc, { workspaceId, actorId, role });
  };
  await seed("owner", WS, "oscar-owner", "member");
  await seed("peer", WS, "mia-peer", "member");
  await seed("admin", WS, "ada-admin", "admin");
  await seed("stranger", OTHER_WS, "olga", "member");
  await seed("strangerAdmin", OTHER_WS, "otto", "admin");
  // A plain member of another workspace who runs the fleet: it drains runners, and sees nothing of `default`.
  await seed("operator", OTHER_WS, "fred-operator", "member");
  await seedMember(nc, { workspaceId: FLEET_WORKSPACE, actorId: "fred-operator", role: "admin" });

  scratch = mkdtempSync(join(tmpdir(), "paddock-authz-"));
  writeFileSync(join(scratch, "hello.txt"), "hello\n");
  const chunks: Buffer[] = [];
  for await (const c of packDirectory(scratch)) chunks.push(Buffer.from(c));
  archive = Buffer.concat(chunks);

  // The revoked principal: the owner's own token, minted and revoked through the API.
  const minted = await call("owner", "POST", "/v1/tokens", { label: "to-revoke" });
  expect(minted.status).toBe(201);
  revokedToken = (minted.body as { token: string }).token;
  const revokedId = (minted.body as { id: string }).id;
  ownerIds.add(revokedId);
  expect((await api(stack.url, revokedToken, "GET", "/v1/tokens")).status).toBe(200);
  expect((await call("owner", "DELETE", `/v1/tokens/${revokedId}`)).status).toBe(200);

  ownerTokenId = await freshOwnerToken();
  session = await freshSession();
  // A session's own service token (of another live session of `default`), as its runner injects it.
  const host = await freshSession();
  await seedToken(nc, TOKENS.session, { workspaceId: WS, actor: { id: host.id, kind: "service" }, sessionId: host.id, createdAt: 1 });
  // A member removed after its token was minted; an expired token of a member.
  await seed("exMember", WS, "rex-removed", "member");
  await (await new Kvm(nc).open("members")).delete(`${WS}.rex-removed`);
  await seed("expired", WS, "eli-expired", "member");
  await seedToken(nc, TOKENS.expired, { workspaceId: WS, actor: { id: "eli-expired", kind: "user" }, createdAt: 1, expiresAt: 2 });
  envId = await freshEnvironment();
  env2Id = await freshEnvironment();
  // A second live session of the owner, so its list has a next page.
  await freshSession();
  // The other workspace has something of its own, so its lists are not trivially empty.
  const theirs = await call("stranger", "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "exec sleep 600"] } });
  expect(theirs.status).toBe(201);
  expect((await call("stranger", "POST", "/v1/environments", { name: "theirs" })).status).toBe(201);
});

afterAll(async () => {
  if (matrix.length > 0) console.table(matrix);
  await nc?.drain();
  await stack?.stop();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe("the Authorizer matrix", () => {
  it.each(ROUTES.map((r) => [r.name, r] as const))("%s", async (name, r) => {
    const got: Record<string, number> = {};
    const want: Record<string, number> = {};
    const row: Record<string, string> = { route: name };
    for (const p of P) {
      const { answer, realId, probe } = await r.run(p);
      collectIds(answer.body);
      got[p] = answer.status;
      want[p] = r.expect ? r.expect(p) : expected(r.kind, p, r.ok, r.sessionOk);
      row[p] = got[p] === want[p] ? String(got[p]) : `${got[p]}≠${want[p]}`;
      // A route whose policy grants another workspace's principal (a fleet operator managing members) shows it what it manages.
      const granted = r.expect !== undefined && want[p] < 300;
      if ((FOREIGN.has(p) || BLIND.has(p)) && !granted) {
        if (FOREIGN.has(p)) assertNoLeak(p, name, answer.body);
        // No existence oracle: the 404 of a real id is the 404 of an id that names nothing.
        if (answer.status === 404 && realId && probe) {
          const fake = fakeOf(realId);
          const missing = await probe(fake);
          expect(missing.status).toBe(404);
          expect(JSON.stringify(answer.body).replaceAll(realId, "ID")).toBe(JSON.stringify(missing.body).replaceAll(fake, "ID"));
        }
      }
      if (answer.status === 401) expect(answer.body).toEqual(UNAUTHENTICATED);
      if (answer.status === 403) expect(answer.body).toMatchObject({ error: { code: "forbidden" } });
      if (answer.status === 404) expect(answer.body).toMatchObject({ error: { code: "not_found" } });
    }
    matrix.push(row);
    expect(got).toEqual(want);
  });
});

describe("nothing leaks to another workspace", () => {
  it("lists show none of the owner's ids, and the owner's cursors reveal nothing", async () => {
    const mine = await call("owner", "GET", "/v1/sessions?limit=1&includeTerminal=true");
    const sessionCursor = (mine.body as { nextCursor?: string }).nextCursor;
    expect(sessionCursor).toBeDefined();
    const envs = await call("owner", "GET", "/v1/environments?limit=1");
    const envCursor = (envs.body as { nextCursor?: string }).nextCursor;
    expect(envCursor).toBeDefined();
    const events = await call("owner", "GET", "/v1/events?limit=1");
    const eventCursor = (events.body as { nextCursor?: string }).nextCursor;
    expect(eventCursor).toBeDefined();
    // The owner can see its own things (so the checks below are not vacuous).
    const all = JSON.stringify((await call("owner", "GET", "/v1/sessions?includeTerminal=true&limit=500")).body);
    expect(all).toContain(session.id);
    expect(JSON.stringify((await call("owner", "GET", "/v1/environments?limit=500")).body)).toContain(env2Id);
    expect(JSON.stringify((await call("owner", "GET", "/v1/events?limit=500")).body)).toContain(session.id);

    for (const p of ["stranger", "strangerAdmin", "operator"] as const) {
      const paths = [
        "/v1/sessions?includeTerminal=true&limit=500",
        `/v1/sessions?includeTerminal=true&cursor=${encodeURIComponent(sessionCursor ?? "")}`,
        `/v1/sessions?parentId=${session.id}&includeTerminal=true`,
        "/v1/environments?limit=500",
        `/v1/environments?cursor=${encodeURIComponent(envCursor ?? "")}`,
        "/v1/events?limit=500",
        `/v1/events?since=${eventCursor ?? ""}`,
        "/v1/events?since=0&limit=500",
        `/v1/events?sessionId=${session.id}&since=0`,
        `/v1/sessions/${session.id}/log?since=0`,
        "/v1/tokens",
      ];
      for (const path of paths) {
        const r = await call(p, "GET", path);
        expect([200, 400, 404], `${path} as ${p}: ${r.status}`).toContain(r.status);
        assertNoLeak(p, path, r.body);
      }
      // Their own lists are theirs: every record is of their workspace.
      const theirs = (await call(p, "GET", "/v1/sessions?includeTerminal=true&limit=500")).body as { sessions: Session[] };
      expect(theirs.sessions.length).toBeGreaterThan(0);
      expect(theirs.sessions.every((s) => s.workspaceId === OTHER_WS)).toBe(true);
      const theirEvents = (await call(p, "GET", "/v1/events?limit=500")).body as { events: Array<{ workspaceId: string }> };
      expect(theirEvents.events.length).toBeGreaterThan(0);
      expect(theirEvents.events.every((e) => e.workspaceId === OTHER_WS)).toBe(true);
    }
  });

  it("a plain member lists only its own tokens", async () => {
    const peer = JSON.stringify((await call("peer", "GET", "/v1/tokens")).body);
    expect(peer).not.toContain(ownerTokenId);
    expect(JSON.stringify((await call("owner", "GET", "/v1/tokens")).body)).toContain(ownerTokenId);
  });
});

describe("routes without a token (single sign-on and runner joins, off on this stack)", () => {
  // How a person gets a token: no principal, valid or not, answers differently (the header is never read).
  const PUBLIC: Array<[string, string, unknown?]> = [
    ["GET", "/v1/auth/oidc"],
    ["GET", "/v1/auth/oidc/login?returnTo=/"],
    ["GET", "/v1/auth/oidc/callback?code=c&state=s"],
    ["POST", "/v1/auth/oidc/redeem", { handoff: `pdh_${"A".repeat(43)}` }],
    ["POST", "/v1/auth/oidc/exchange", { idToken: "eyJhbGciOiJSUzI1NiJ9.e30.c2ln" }],
    // The join token is the credential of a join (runner joins are off on this stack too).
    ["POST", "/v1/runners/join", { joinToken: `pdj_${"A".repeat(43)}`, publicKey: `U${"A".repeat(55)}` }],
  ];
  it.each(PUBLIC)("%s %s answers every principal the same", async (method, path, body) => {
    const answers = new Map<Principal, ApiAnswer>();
    for (const p of P) answers.set(p, await call(p, method, path, body));
    const none = answers.get("none");
    expect(none?.status).toBe(path === "/v1/auth/oidc" ? 200 : 404);
    for (const p of P) expect(answers.get(p), `${method} ${path} as ${p}`).toEqual(none);
    matrix.push({ route: `${method} ${path.split("?")[0] ?? path}`, ...Object.fromEntries(P.map((p) => [p, String(answers.get(p)?.status)])) });
  });
});

describe("runner state changes (last: they touch the one runner everything runs on)", () => {
  it.each([["drain"], ["cordon"], ["uncordon"]] as const)("POST /v1/runners/:id/%s", async (verb) => {
    const got: Record<string, number> = {};
    const want: Record<string, number> = {};
    const row: Record<string, string> = { route: `POST /v1/runners/:id/${verb}` };
    for (const p of P) {
      const r = await call(p, "POST", `/v1/runners/runner-1/${verb}`, {});
      got[p] = r.status;
      want[p] = expected("fleetAdmin", p, 200);
      row[p] = got[p] === want[p] ? String(got[p]) : `${got[p]}≠${want[p]}`;
      if (FOREIGN.has(p)) assertNoLeak(p, verb, r.body);
    }
    matrix.push(row);
    expect(got).toEqual(want);
  });

  it("leaves the runner active", async () => {
    const r = await call("admin", "GET", "/v1/runners/runner-1");
    expect(r.body).toMatchObject({ state: "active" });
  });
});
