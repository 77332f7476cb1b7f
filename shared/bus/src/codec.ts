import type { z } from "zod";
import { describeZodError, InvalidError } from "@paddock/contracts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Validates then encodes; a message that breaks its contract is never sent. */
export function encodeJson<S extends z.ZodType>(schema: S, value: z.input<S>): Uint8Array {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new InvalidError(`outgoing message breaks its contract: ${describeZodError(parsed.error)}`);
  }
  return encoder.encode(JSON.stringify(parsed.data));
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
