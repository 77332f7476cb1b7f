import type { z } from "zod";
import { describeZodError, InvalidError } from "@paddock/contracts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Encodes a message of a schema to bytes for the bus (see encoderOf for the one a connection uses). */
export type Encoder = <S extends z.ZodType>(schema: S, value: z.input<S>) => Uint8Array;

/**
 * Encodes a message after checking it against its schema: one that breaks its
 * contract is refused (InvalidError) and never sent. Always checked: for tests
 * and for cold paths that are not worth the option (records made by an HTTP
 * call, WebSocket control frames); what a service sends on the bus goes
 * through its bus's encoder (encoderOf).
 */
export function encodeJson<S extends z.ZodType>(schema: S, value: z.input<S>): Uint8Array {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new InvalidError(`outgoing message breaks its contract: ${describeZodError(parsed.error)}`);
  }
  return stringify(parsed.data);
}

/**
 * Encodes a message without checking it: the receiver's check is the one that
 * counts (see encoderOf). The schema is taken so that both encoders have one shape.
 */
export function encodeUnchecked<S extends z.ZodType>(_schema: S, value: z.input<S>): Uint8Array {
  return stringify(value);
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
