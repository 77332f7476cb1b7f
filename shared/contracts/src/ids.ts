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

/** A random id: prefix plus 20 base-36 characters (~103 bits). */
export const randomId: NewId = (prefix) => {
  const bytes = crypto.getRandomValues(new Uint8Array(20));
  let out = `${prefix}_`;
  for (const b of bytes) out += ALPHABET[b % 36];
  return out;
};
