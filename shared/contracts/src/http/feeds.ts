/**
 * The live feeds of the read routes (`?follow=true`): what each NDJSON line
 * is, and the queries that ask for them. A feed of records (runners, tokens)
 * opens with every current record, then one `synced` line, then a line per
 * change; a client that applies the lines in order holds the current set.
 * The events feed's lines carry their stream sequence, the cursor a client
 * resumes after (`since=<seq>`) when the connection drops.
 */
import { z } from "zod";
import { AuditActionSchema, AuditEvent, ResourceKind } from "../audit.ts";
import { Runner } from "../fleet.ts";
import { EpochMs, Id } from "../ids.ts";
import { TokenInfo } from "../tokens.ts";
import { QueryBool, QueryCursor, QueryLimitValue } from "./query.ts";
import { DEFAULT_PAGE_LIMIT } from "../api.ts";

/** An audit event as the API answers it: with `seq`, its place in the audit stream (resume after it with `?since=<seq>`). */
export const AuditEntry = AuditEvent.extend({ seq: z.number().int().positive() }).strict();
export type AuditEntry = z.infer<typeof AuditEntry>;

/** A line of `GET /v1/runners?follow=true`. */
export const RunnerFeedLine = z.union([
  /** The runner's record as it is now (a new runner, or any change: state, capacity, capabilities). */
  z.object({ runner: Runner }).strict(),
  /** The runner renewed its lease at `at` (the server's time): `lastSeenAt` moves, nothing else. */
  z.object({ seen: z.object({ poolId: Id, id: Id, at: EpochMs }).strict() }).strict(),
  /** The runner's record is gone. */
  z.object({ removed: z.object({ poolId: Id, id: Id }).strict() }).strict(),
  /** Every runner that existed when the feed opened has been sent. */
  z.object({ synced: z.literal(true) }).strict(),
]);
export type RunnerFeedLine = z.infer<typeof RunnerFeedLine>;

/** A line of `GET /v1/tokens?follow=true`: the caller's own tokens (never a value or hash). */
export const TokenFeedLine = z.union([
  z.object({ token: TokenInfo }).strict(),
  /** The token was revoked. */
  z.object({ removed: z.object({ id: Id }).strict() }).strict(),
  z.object({ synced: z.literal(true) }).strict(),
]);
export type TokenFeedLine = z.infer<typeof TokenFeedLine>;

const noPagingWithFollow = (q: { follow: boolean; limit?: number | undefined; cursor?: string | undefined }, ctx: z.RefinementCtx) => {
  if (!q.follow) return;
  for (const key of ["limit", "cursor"] as const)
    if (q[key] !== undefined) ctx.addIssue({ code: "custom", path: [key], message: "does not apply with follow=true" });
};

/** `follow=true` streams RunnerFeedLine NDJSON; `limit` and `cursor` page only the non-followed read. */
export const ListRunnersQuery = z
  .object({ limit: QueryLimitValue.optional(), cursor: QueryCursor, follow: QueryBool })
  .strict()
  .superRefine(noPagingWithFollow)
  .transform((q) => ({ ...q, limit: q.limit ?? DEFAULT_PAGE_LIMIT }));

/** `follow=true` streams TokenFeedLine NDJSON. */
export const ListTokensQuery = z.object({ follow: QueryBool }).strict();

/** `since`: a stream sequence (events after it), or `now` (a followed read: only what happens from now on). */
const EventsSince = z
  .string()
  .regex(/^(\d{1,15}|now)$/, 'must be a stream sequence or "now"')
  .transform((v) => (v === "now" ? ("now" as const) : Number(v)))
  .default(0);

/** `startTime`: epoch ms; events the stream stored at or after it. */
const QueryEpochMs = z
  .string()
  .regex(/^\d{1,15}$/, "must be epoch milliseconds")
  .transform(Number);

/** `action=create,exec`: events of any of these actions (at most 16). */
const QueryActions = z
  .string()
  .max(512)
  .transform((v) => v.split(","))
  .pipe(z.array(AuditActionSchema).min(1).max(16));

/**
 * `follow=true` streams AuditEntry NDJSON from the start, then live; `limit`
 * pages only the non-followed read. The start is `since` (after that
 * sequence; `now` for a follow: nothing already stored) or `startTime`, not
 * both; `endTime` ends a page read (events at or before it). `action`,
 * `actorId` and `resourceKind` keep only the events that match every one given.
 */
export const EventsQuery = z
  .object({
    sessionId: Id.optional(),
    since: EventsSince,
    startTime: QueryEpochMs.optional(),
    endTime: QueryEpochMs.optional(),
    action: QueryActions.optional(),
    actorId: Id.optional(),
    resourceKind: ResourceKind.optional(),
    limit: QueryLimitValue.optional(),
    follow: QueryBool,
  })
  .strict()
  .superRefine((q, ctx) => {
    if (q.follow && q.limit !== undefined) ctx.addIssue({ code: "custom", path: ["limit"], message: "does not apply with follow=true" });
    if (!q.follow && q.since === "now") ctx.addIssue({ code: "custom", path: ["since"], message: '"now" applies with follow=true only' });
    if (q.startTime !== undefined && q.since !== 0) ctx.addIssue({ code: "custom", path: ["startTime"], message: "does not apply with since" });
    if (q.follow && q.endTime !== undefined) ctx.addIssue({ code: "custom", path: ["endTime"], message: "does not apply with follow=true" });
    if (q.endTime !== undefined && q.startTime !== undefined && q.endTime < q.startTime) ctx.addIssue({ code: "custom", path: ["endTime"], message: "is before startTime" });
    if (q.sessionId !== undefined && q.resourceKind !== undefined && q.resourceKind !== "session") ctx.addIssue({ code: "custom", path: ["resourceKind"], message: "a session's events are all of kind session" });
  })
  .transform((q) => ({ ...q, limit: q.limit ?? DEFAULT_PAGE_LIMIT }));
