import { z } from "zod";
import { Id } from "../ids.ts";
import { CreatedJoinToken, CreateJoinTokenBody, JoinedRunner, JoinRunnerBody, RevokedRunner } from "../runner-join.ts";
import { EmptyBody, httpRoute, json, jsonBody } from "./route.ts";

/* Runners on remote hosts (issue 29 item 4; docs/decisions/0061-runner-join.md). */

export const RunnerJoinRoutes = {
  createJoinToken: httpRoute({
    method: "POST",
    path: "/v1/runners/join-tokens",
    summary: "Mint a one-time join token for a pool (fleet operators); the value is shown once. A runner host spends it with POST /v1/runners/join.",
    body: jsonBody(CreateJoinTokenBody),
    responses: [json(CreatedJoinToken, [201])],
    errors: ["forbidden", "rate_limited"],
  }),
  revokeRunner: httpRoute({
    method: "POST",
    path: "/v1/runners/:id/revoke",
    summary: "Revoke a joined runner (fleet operators): its NATS connections are closed, it can no longer connect, and it is declared lost so its sessions move elsewhere.",
    params: z.object({ id: Id }).strict(),
    body: jsonBody(EmptyBody, { optional: true }),
    responses: [json(RevokedRunner)],
    errors: ["forbidden", "not_found"],
  }),
} as const;

/** Without a bearer token: the join token is the credential. */
export const RunnerJoinPublicRoutes = {
  joinRunner: httpRoute({
    method: "POST",
    path: "/v1/runners/join",
    summary: "Spend a join token (once) to register a runner's public nkey; answers its runner id, pool and NATS URLs. No bearer token: the join token is the credential.",
    body: jsonBody(JoinRunnerBody),
    responses: [json(JoinedRunner, [201])],
    errors: ["invalid", "unauthenticated", "conflict", "rate_limited"],
  }),
} as const;
