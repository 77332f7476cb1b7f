import { z } from "zod";

/**
 * Identities travel inside NATS subjects and KV keys, so they are restricted to
 * one subject token: no dots, wildcards or whitespace.
 */
export const Id = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "must be 1-64 of [A-Za-z0-9_-]");
export type Id = z.infer<typeof Id>;

/** Milliseconds since the Unix epoch. */
export const EpochMs = z.number().int().nonnegative();

/** A monotonic fencing token; 0 means "none granted yet". */
export const Generation = z.number().int().nonnegative();
