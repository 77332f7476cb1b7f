import { z } from "zod";
import { DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT } from "../api.ts";

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
