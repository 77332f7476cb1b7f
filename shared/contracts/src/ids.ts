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

/** Source of identities, injected into every service so tests can make them predictable. */
export type NewId = (prefix: string) => string;

/** Clock in ms since the epoch, injected for the same reason. */
export type Now = () => number;

const ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";

const ID_BYTES = 20;
/** Random bytes are drawn in blocks: one CSPRNG call per id was a measurable share of a busy scheduler. */
const POOL_BYTES = ID_BYTES * 256;
let pool = new Uint8Array(0);
let used = 0;

/** A random id: prefix plus 20 base-36 characters (~103 bits). */
export const randomId: NewId = (prefix) => {
  if (used + ID_BYTES > pool.length) {
    pool = crypto.getRandomValues(new Uint8Array(POOL_BYTES));
    used = 0;
  }
  let out = `${prefix}_`;
  for (let i = used; i < used + ID_BYTES; i++) out += ALPHABET[(pool[i] ?? 0) % 36];
  used += ID_BYTES;
  return out;
};
