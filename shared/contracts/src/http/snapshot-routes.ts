import { z } from "zod";
import { Id } from "../ids.ts";
import { Checkpoint } from "../session.ts";
import { EmptyBody, httpRoute, json, jsonBody, NoQuery } from "./route.ts";
import { DEFAULT_WAIT_MS, QueryWaitMs } from "./query.ts";

/**
 * A snapshot the runner had not finished within the call's wait (a large
 * workspace): 202 with this and `Location: /v1/sessions/:id/snapshots/:requestId`,
 * which answers the Checkpoint once it is taken.
 */
export const SnapshotPending = z.object({ sessionId: Id, requestId: Id, status: z.literal("pending") }).strict();
export type SnapshotPending = z.infer<typeof SnapshotPending>;
/** `?timeoutMs=N` of GET …/snapshots/:requestId: how long to wait for it (DEFAULT_WAIT_MS when absent). */
export const SnapshotWaitQuery = z.object({ timeoutMs: QueryWaitMs }).strict();

/** Taking a snapshot, and waiting on one a 202 named. */
export const SnapshotRoutes = {
  snapshotSession: httpRoute({
    method: "POST",
    path: "/v1/sessions/:id/snapshot",
    summary:
      "Checkpoint a running or warm-suspended session's workspace; answers the Checkpoint, or 202 and where to wait for it when the runner has not finished within the call's wait.",
    params: z.object({ id: Id }).strict(),
    // A snapshot changes no state: nothing to wait for.
    query: NoQuery,
    body: jsonBody(EmptyBody, { optional: true }),
    responses: [json(Checkpoint), json(SnapshotPending, [202], "the runner has not finished yet: GET the Location header's …/snapshots/:requestId")],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  getSnapshot: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/snapshots/:requestId",
    summary: `Wait for a snapshot a 202 named: its Checkpoint once taken, 202 again if ?timeoutMs (default ${DEFAULT_WAIT_MS}) passed first; 409 if the runner refused it or the session ended; 404 if unknown or given up.`,
    params: z.object({ id: Id, requestId: Id }).strict(),
    query: SnapshotWaitQuery,
    responses: [json(Checkpoint), json(SnapshotPending, [202], "not taken yet")],
    errors: ["forbidden", "not_found", "conflict"],
  }),
} as const;
