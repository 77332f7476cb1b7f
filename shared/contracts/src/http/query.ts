import { z } from "zod";
import { DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT } from "../api.ts";
import { SessionStateSchema } from "../session.ts";

/*
 * Query-string values: every one arrives as a string and is parsed here, once,
 * for the gateway (which refuses what does not parse) and for docs/api.md.
 */

/** A page limit: an integer ≥ 1, clamped to MAX_PAGE_LIMIT (a larger one is not an error). */
export const QueryLimitValue = z
  .string()
  .regex(/^\d{1,15}$/, "must be an integer")
  .transform(Number)
  .pipe(z.number().int().min(1))
  .transform((n) => Math.min(n, MAX_PAGE_LIMIT));

/** A page limit, DEFAULT_PAGE_LIMIT when absent. */
export const QueryLimit = QueryLimitValue.default(DEFAULT_PAGE_LIMIT);

/** An opaque page cursor from a previous page's `nextCursor`. */
export const QueryCursor = z.string().min(1).max(256).optional();

/** `true` or `false`; false when absent. */
export const QueryBool = z
  .enum(["true", "false"], { message: 'must be "true" or "false"' })
  .transform((v) => v === "true")
  .default(false);

/** A stream sequence (the cursor of events and logs); 0 when absent. */
export const QuerySeq = z
  .string()
  .regex(/^\d{1,15}$/, "must be a stream sequence")
  .transform(Number)
  .default(0);

/** The longest a call may wait for a session's state (`timeoutMs`); a longer one is `invalid`. */
export const MAX_WAIT_MS = 300_000;
/** How long a call waits when it names a state but no `timeoutMs`. */
export const DEFAULT_WAIT_MS = 30_000;

/** `timeoutMs` of a wait: 0 to MAX_WAIT_MS ms. */
export const QueryWaitMs = z
  .string()
  .regex(/^\d{1,9}$/, "must be an integer number of ms")
  .transform(Number)
  .pipe(z.number().int().min(0).max(MAX_WAIT_MS, `must be at most ${MAX_WAIT_MS} ms`))
  .optional();

/** A timeout without the state it bounds is a mistake, not a no-op. */
const timeoutNeedsState = (key: string) => (q: { timeoutMs?: number | undefined } & Record<string, unknown>, ctx: z.RefinementCtx) => {
  if (q.timeoutMs !== undefined && q[key] === undefined) ctx.addIssue({ code: "custom", path: ["timeoutMs"], message: `applies only with ${key}=STATE` });
};

/** `?wait=STATE[&timeoutMs=N]` of a create or a lifecycle call: answer once the session is in STATE (or cannot be, or the time is up). */
export const WaitQuery = z
  .object({ wait: SessionStateSchema.optional(), timeoutMs: QueryWaitMs })
  .strict()
  .superRefine(timeoutNeedsState("wait"));

/** `?waitFor=STATE[&timeoutMs=N]` of GET /v1/sessions/:id: a long poll. */
export const WaitForQuery = z
  .object({ waitFor: SessionStateSchema.optional(), timeoutMs: QueryWaitMs })
  .strict()
  .superRefine(timeoutNeedsState("waitFor"));

/** `depth` of a listing: 1 (the directory's own entries) when absent. */
export const QueryDepth = z
  .string()
  .regex(/^\d{1,3}$/, "must be an integer")
  .transform(Number)
  .pipe(z.number().int().min(1).max(64, "must be at most 64"))
  .default(1);
