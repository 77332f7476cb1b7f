import { z } from "zod";
import { Api } from "../api.ts";
import { CreateEnvironmentBody, Environment, PutSecretBody, SECRET_BODY_MAX_BYTES, SecretName, UpdateEnvironmentBody } from "../environment.ts";
import { Runner } from "../fleet.ts";
import { Id } from "../ids.ts";
import { CreateSessionBody, Session, SessionStateSchema } from "../session.ts";
import { AttachQuery, ServerFrame } from "../terminal.ts";
import { AttachTicket, AttachTicketBody, CreatedToken, CreateTokenBody, TokenInfo, TokenList } from "../tokens.ts";
import { PortNumber, PreviewTicket } from "../ports.ts";
import { WorkspaceDiffReply, WorkspacePath, WorkspacePushReply, WorkspaceReposReply } from "../workspace.ts";
import { EmptyBody, httpRoute, json, jsonBody, pathParamNames, pathPattern, type HttpRoute } from "./route.ts";
import { QueryBool, QueryCursor, QueryLimit, QuerySeq, WaitForQuery, WaitQuery } from "./query.ts";
import { ExecRoutes } from "./exec-routes.ts";
import { SnapshotRoutes } from "./snapshot-routes.ts";
import { AgentRoutes } from "./agent-routes.ts";
import { WebhookRoutes } from "./webhook-routes.ts";
import { MemberRoutes } from "./member-routes.ts";
import { OidcRoutes } from "./oidc-routes.ts";
import { RunnerJoinPublicRoutes, RunnerJoinRoutes } from "./runner-join-routes.ts";
import { MetricsRoutes } from "./metrics-routes.ts";
import { FileRoutes } from "./file-routes.ts";
import { AuditEntry, EventsQuery, ListRunnersQuery, ListTokensQuery, RunnerFeedLine, TokenFeedLine } from "./feeds.ts";

export { NDJSON } from "./route.ts";
export { AuditEntry, EventsQuery, ListRunnersQuery, ListTokensQuery, RunnerFeedLine, TokenFeedLine } from "./feeds.ts";
export { ProcessOutput, ProcessOutputQuery, ProcessSignalBody, ProcessStdinQuery } from "./exec-routes.ts";
export { SnapshotPending, SnapshotWaitQuery } from "./snapshot-routes.ts";
/** Response header of the log route: the cursor of the last chunk included (resume with ?since). */
export const LOG_CURSOR_HEADER = "paddock-cursor";
/** Content type of a workspace archive (tar, gzip). */
export const ARCHIVE_CONTENT_TYPE = "application/gzip";

const SessionParams = z.object({ id: Id }).strict();
const IdParams = z.object({ id: Id }).strict();

export const ListSessionsQuery = z
  .object({ limit: QueryLimit, cursor: QueryCursor, includeTerminal: QueryBool, parentId: Id.optional(), creatorId: Id.optional() })
  .strict();
export const ListEnvironmentsQuery = z.object({ limit: QueryLimit, cursor: z.string().min(1).max(512).optional() }).strict();
export const LogQuery = z.object({ app: Id.optional(), since: QuerySeq }).strict();
/** `?path=`: workspace-relative, the workspace itself when absent. */
export const WorkspaceQuery = z.object({ path: WorkspacePath.optional() }).strict();

/** Body of POST /v1/sessions/:id/suspend: `warm` is required, nothing else is allowed. */
export const SuspendBody = z.object({ warm: z.boolean() }).strict();

/** How a call that was asked to wait for a state ended: the session is in it, can no longer come to it, or the time ran out. */
export const WaitOutcome = { reached: "reached", unreachable: "unreachable", timeout: "timeout" } as const;
export type WaitOutcome = (typeof WaitOutcome)[keyof typeof WaitOutcome];
export const Waited = z.object({ state: SessionStateSchema, outcome: z.enum(WaitOutcome) }).strict();
export type Waited = z.infer<typeof Waited>;
/** A session record as a call answers it: with `waited` when the call was asked to wait (`wait`, `waitFor`). */
export const SessionAnswer = Session.extend({ waited: Waited.optional() });

export const SessionPage = Api.listSessions.result;
export const EnvironmentPage = Api.listEnvironments.result;
export const RunnerPage = Api.listRunners.result;
export const EventPage = z.object({ events: z.array(AuditEntry), nextCursor: z.string().optional() }).strict();

/** The released session and its replacement; `waited` says how a wait for the replacement's state ended. */
export const RecycleAnswer = Api.recycleSession.result.extend({ waited: Waited.optional() });
export const SecretList = z.object({ secrets: z.array(z.object({ name: SecretName }).strict()) }).strict();

const lifecycle = <B extends z.ZodType>(verb: string, summary: string, body: B, optional: boolean) =>
  httpRoute({
    method: "POST",
    path: `/v1/sessions/:id/${verb}`,
    summary,
    params: SessionParams,
    query: WaitQuery,
    body: jsonBody(body, { optional }),
    responses: [json(SessionAnswer)],
    errors: ["forbidden", "not_found", "conflict"],
  });

const runnerState = (verb: string, summary: string) =>
  httpRoute({
    method: "POST",
    path: `/v1/runners/:id/${verb}`,
    summary,
    params: IdParams,
    body: jsonBody(EmptyBody, { optional: true }),
    responses: [json(Runner)],
    errors: ["forbidden", "not_found", "conflict"],
  });

/**
 * Every public route of the gateway, by name. The gateway serves exactly
 * these (a test asks its router); the CLI calls through them; docs/api.md is
 * generated from them.
 */
const PreviewTicketBody = z.object({ port: PortNumber }).strict();

export const HttpApi = {
  createSession: httpRoute({
    method: "POST",
    path: "/v1/sessions",
    summary: "Create a session (201; 200 with the existing one when its idempotency key was seen); ?wait=running answers once it runs (or cannot, or timeoutMs passed: see `waited`).",
    query: WaitQuery,
    body: jsonBody(CreateSessionBody),
    responses: [json(SessionAnswer, [201, 200])],
    errors: ["forbidden", "not_found", "conflict", "too_large", "rate_limited"],
  }),
  listSessions: httpRoute({
    method: "GET",
    path: "/v1/sessions",
    summary:
      "List the workspace's sessions, a page at a time (?includeTerminal=true adds ended ones; ?parentId= the children of one; ?creatorId= the ones an actor created). A session's own token lists only the sessions it created.",
    query: ListSessionsQuery,
    responses: [json(SessionPage)],
    errors: ["forbidden"],
  }),
  getSession: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id",
    summary: "Get a session; ?waitFor=STATE long-polls until it is in STATE (or cannot be, or timeoutMs passed: see `waited`).",
    params: SessionParams,
    query: WaitForQuery,
    responses: [json(SessionAnswer)],
    errors: ["forbidden", "not_found"],
  }),
  deleteSession: httpRoute({
    method: "DELETE",
    path: "/v1/sessions/:id",
    summary: "Delete (cancel or destroy) a session; answers the record as it now is.",
    params: SessionParams,
    query: WaitQuery,
    responses: [json(SessionAnswer)],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  suspendSession: lifecycle("suspend", "Suspend a session: warm (processes stopped in place) or cold (checkpointed, sandbox removed).", SuspendBody, false),
  resumeSession: lifecycle("resume", "Resume a suspended session.", EmptyBody, true),
  recycleSession: {
    ...lifecycle("recycle", "Replace a session by a fresh one from its latest checkpoint; answers both.", EmptyBody, true),
    responses: [json(RecycleAnswer, [201])],
  },
  restartApp: httpRoute({
    method: "POST",
    path: "/v1/sessions/:id/apps/:app/restart",
    summary: "Restart one app of a session.",
    params: z.object({ id: Id, app: Id }).strict(),
    query: WaitQuery,
    body: jsonBody(EmptyBody, { optional: true }),
    responses: [json(SessionAnswer)],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  createAttachTicket: httpRoute({
    method: "POST",
    path: "/v1/sessions/:id/attach-ticket",
    summary: "A single-use, 30-second ticket that replaces the Authorization header of one terminal attach.",
    params: SessionParams,
    body: jsonBody(AttachTicketBody, { optional: true }),
    responses: [json(AttachTicket, [201])],
    errors: ["forbidden", "not_found"],
  }),
  createPreviewTicket: httpRoute({
    method: "POST",
    path: "/v1/sessions/:id/preview-ticket",
    summary: "A single-use, one-minute URL that opens a private port in a browser: its one use sets a preview cookie for that port (docs/ports.md).",
    params: SessionParams,
    body: jsonBody(PreviewTicketBody),
    responses: [json(PreviewTicket, [201])],
    errors: ["invalid", "unauthenticated", "forbidden", "not_found"],
  }),
  attachTerminal: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/terminal",
    summary: "The terminal WebSocket: output frames and control messages; input when attached as controller.",
    params: SessionParams,
    query: AttachQuery,
    responses: [{ kind: "websocket", status: [101], schema: ServerFrame }],
    errors: ["forbidden", "not_found", "conflict", "rate_limited"],
  }),
  readLog: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/log",
    summary: "The terminal output retained so far, as raw bytes; header paddock-cursor resumes it with ?since.",
    params: SessionParams,
    query: LogQuery,
    responses: [{ kind: "bytes", status: [200], contentType: "application/octet-stream", headers: { [LOG_CURSOR_HEADER]: "the cursor of the last chunk included" } }],
    errors: ["forbidden", "not_found"],
  }),
  pushWorkspace: httpRoute({
    method: "PUT",
    path: "/v1/sessions/:id/workspace",
    summary: "Unpack a tar.gz into the live session's workspace at ?path.",
    params: SessionParams,
    query: WorkspaceQuery,
    body: { kind: "bytes", contentType: ARCHIVE_CONTENT_TYPE },
    responses: [json(WorkspacePushReply)],
    errors: ["forbidden", "not_found", "conflict", "too_large"],
  }),
  pullWorkspace: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/workspace",
    summary: "The live session's workspace (or ?path in it) as a tar.gz.",
    params: SessionParams,
    query: WorkspaceQuery,
    responses: [{ kind: "bytes", status: [200], contentType: ARCHIVE_CONTENT_TYPE }],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  ...FileRoutes,
  ...SnapshotRoutes,
  ...ExecRoutes,
  ...AgentRoutes,
  ...WebhookRoutes,
  ...MemberRoutes,
  ...RunnerJoinRoutes,
  ...MetricsRoutes,
  readDiff: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/diff",
    summary: "The git diff of every repository in the live session's workspace.",
    params: SessionParams,
    responses: [json(WorkspaceDiffReply)],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  listRepos: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/repos",
    summary: "Every repository in the live session's workspace: its path, branch, head commit and whether it is dirty.",
    params: SessionParams,
    responses: [json(WorkspaceReposReply)],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  createEnvironment: httpRoute({
    method: "POST",
    path: "/v1/environments",
    summary: "Create an environment (admins only when it names secretRefs).",
    body: jsonBody(CreateEnvironmentBody),
    responses: [json(Environment, [201])],
    errors: ["forbidden", "conflict", "too_large"],
  }),
  listEnvironments: httpRoute({
    method: "GET",
    path: "/v1/environments",
    summary: "List the workspace's environments, a page at a time.",
    query: ListEnvironmentsQuery,
    responses: [json(EnvironmentPage)],
    errors: ["forbidden"],
  }),
  getEnvironment: httpRoute({
    method: "GET",
    path: "/v1/environments/:id",
    summary: "Get an environment.",
    params: IdParams,
    responses: [json(Environment)],
    errors: ["forbidden", "not_found"],
  }),
  updateEnvironment: httpRoute({
    method: "PATCH",
    path: "/v1/environments/:id",
    summary: 'Update an environment (admins): absent fields unchanged, "" or [] clears.',
    params: IdParams,
    body: jsonBody(UpdateEnvironmentBody),
    responses: [json(Environment)],
    errors: ["forbidden", "not_found", "conflict", "too_large"],
  }),
  deleteEnvironment: httpRoute({
    method: "DELETE",
    path: "/v1/environments/:id",
    summary: "Delete an environment (admins); answers the deleted record.",
    params: IdParams,
    responses: [json(Environment)],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  listRunners: httpRoute({
    method: "GET",
    path: "/v1/runners",
    summary: "List the fleet's runners, a page at a time; ?follow=true streams them and every change.",
    query: ListRunnersQuery,
    responses: [json(RunnerPage, [200], "follow=false"), { kind: "ndjson", status: [200], schema: RunnerFeedLine, when: "follow=true" }],
    errors: ["forbidden"],
  }),
  getRunner: httpRoute({
    method: "GET",
    path: "/v1/runners/:id",
    summary: "Get a runner.",
    params: IdParams,
    responses: [json(Runner)],
    errors: ["forbidden", "not_found"],
  }),
  drainRunner: runnerState("drain", "Drain a runner (admins): no new placements, its sessions move away."),
  cordonRunner: runnerState("cordon", "Cordon a runner (admins): no new placements, its sessions stay."),
  uncordonRunner: runnerState("uncordon", "Make a runner active again (admins)."),
  listEvents: httpRoute({
    method: "GET",
    path: "/v1/events",
    summary: "Audit events of the workspace or of one session, after ?since (or from ?startTime); ?follow=true streams them live.",
    query: EventsQuery,
    responses: [json(EventPage, [200], "follow=false"), { kind: "ndjson", status: [200], schema: AuditEntry, when: "follow=true" }],
    errors: ["forbidden", "not_found"],
  }),
  createToken: httpRoute({
    method: "POST",
    path: "/v1/tokens",
    summary: "Mint an API token for the caller; the value is shown once.",
    body: jsonBody(CreateTokenBody, { optional: true }),
    responses: [json(CreatedToken, [201])],
    errors: ["forbidden", "conflict", "rate_limited"],
  }),
  listTokens: httpRoute({
    method: "GET",
    path: "/v1/tokens",
    summary: "The caller's own tokens (never a value or hash); ?follow=true streams them and every change.",
    query: ListTokensQuery,
    responses: [json(TokenList, [200], "follow=false"), { kind: "ndjson", status: [200], schema: TokenFeedLine, when: "follow=true" }],
    errors: ["forbidden"],
  }),
  revokeToken: httpRoute({
    method: "DELETE",
    path: "/v1/tokens/:id",
    summary: "Revoke a token (its owner or an admin); open streams it authorized are closed.",
    params: IdParams,
    responses: [json(TokenInfo)],
    errors: ["forbidden", "not_found"],
  }),
  putSecret: httpRoute({
    method: "PUT",
    path: "/v1/secrets/:name",
    summary: "Store a secret value (admins); it is never echoed.",
    params: z.object({ name: SecretName }).strict(),
    body: jsonBody(PutSecretBody, { maxBytes: SECRET_BODY_MAX_BYTES }),
    responses: [{ kind: "empty", status: [204] }],
    errors: ["forbidden", "too_large"],
  }),
  listSecrets: httpRoute({
    method: "GET",
    path: "/v1/secrets",
    summary: "The workspace's secret names.",
    responses: [json(SecretList)],
    errors: ["forbidden"],
  }),
  deleteSecret: httpRoute({
    method: "DELETE",
    path: "/v1/secrets/:name",
    summary: "Delete a secret (admins).",
    params: z.object({ name: SecretName }).strict(),
    responses: [{ kind: "empty", status: [204] }],
    errors: ["forbidden", "not_found"],
  }),
} as const satisfies Record<string, HttpRoute>;
export type HttpApi = typeof HttpApi;
export type HttpRouteName = keyof HttpApi;

/**
 * Unauthenticated /v1 routes that are how a person gets a token (single
 * sign-on): no bearer token is read, so they are outside HttpApi, whose every
 * route authenticates.
 */
export const PublicApi = { ...OidcRoutes, ...RunnerJoinPublicRoutes } as const satisfies Record<string, HttpRoute>;
export type PublicRouteName = keyof typeof PublicApi;

/** Unauthenticated routes: the probes outside /v1 (load balancers, orchestrators) and the API's own description. */
export const HealthRoutes = {
  openapi: httpRoute({
    method: "GET",
    path: "/v1/openapi.json",
    summary: "The OpenAPI 3.1 description of every route (generated from the contract; docs/openapi.json); no token needed.",
    responses: [json(z.record(z.string(), z.unknown()))],
  }),
  healthz: httpRoute({
    method: "GET",
    path: "/healthz",
    summary: "Liveness: the process answers.",
    responses: [json(z.object({ status: z.literal("ok") }).strict())],
  }),
  readyz: httpRoute({
    method: "GET",
    path: "/readyz",
    summary: "Readiness: connected to NATS and listening (503 otherwise).",
    responses: [json(z.object({ status: z.enum(["ready", "not_ready"]) }).strict(), [200, 503])],
    errors: ["unavailable"],
  }),
} as const satisfies Record<string, HttpRoute>;

/** The contract route a request is for, with its raw path parameters; undefined when none matches. */
export function findHttpRoute(method: string, pathname: string): { name: HttpRouteName; route: HttpRoute; params: Record<string, string> } | undefined {
  for (const [name, route] of Object.entries(HttpApi) as Array<[HttpRouteName, HttpRoute]>) {
    if (route.method !== method) continue;
    const m = pathPattern(route.path).exec(pathname);
    if (!m) continue;
    const params: Record<string, string> = {};
    pathParamNames(route.path).forEach((p, i) => {
      const value = m[i + 1] ?? "";
      try {
        params[p] = decodeURIComponent(value);
      } catch {
        params[p] = value; // not decodable: the route's schema refuses it
      }
    });
    return { name, route, params };
  }
  return undefined;
}
