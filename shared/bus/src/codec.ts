import type { z } from "zod";
import { describeZodError, InvalidError } from "@paddock/contracts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * Whether encodeJson checks outgoing messages against their schema (a process-wide
 * assertion, set once at start). Every receiver validates what it reads at
 * the bus boundary, so this second check only catches a sender's own bug
 * sooner; it was 14% of the scheduler's CPU under load (`pnpm bench`,
 * benchmark 1). On in tests and in-process use; a service's runService sets it
 * from its config, `PADDOCK_VALIDATE_OUTGOING` (off by default).
 */
let validateOutgoing = true;

/** Turns the check of outgoing messages on or off for this process (see validateOutgoing). */
export function setOutgoingValidation(on: boolean): void {
  validateOutgoing = on;
}

/** Encodes a message; with outgoing validation on, one that breaks its contract is never sent. */
export function encodeJson<S extends z.ZodType>(schema: S, value: z.input<S>): Uint8Array {
  if (!validateOutgoing) return stringify(value);
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new InvalidError(`outgoing message breaks its contract: ${describeZodError(parsed.error)}`);
  }
  return stringify(parsed.data);
}

/** A value JSON cannot encode (nested past the stack, a BigInt, a cycle) is the caller's bad input: `invalid`. */
function stringify(value: unknown): Uint8Array {
  let text: string;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    throw new InvalidError(`outgoing message cannot be encoded as JSON: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  return encoder.encode(text);
}

export type Decoded<T> = { ok: true; value: T } | { ok: false; reason: string };

/** Parses and validates bytes received from the bus. */
export function decodeJson<S extends z.ZodType>(schema: S, bytes: Uint8Array): Decoded<z.infer<S>> {
  let raw: unknown;
  try {
    raw = JSON.parse(decoder.decode(bytes));
  } catch {
    return { ok: false, reason: "not JSON" };
  }
  const parsed = schema.safeParse(raw);
  return parsed.success ? { ok: true, value: parsed.data } : { ok: false, reason: describeZodError(parsed.error) };
}
