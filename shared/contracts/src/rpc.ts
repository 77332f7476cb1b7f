import type { z } from "zod";

/**
 * One request/reply operation on the bus: its subject and both schemas. A
 * leaf of its own, so that the modules defining rpcs (api, fleet-rpc,
 * workspace) can import each other's schemas without a cycle.
 */
export interface Rpc<Req extends z.ZodType, Res extends z.ZodType> {
  readonly subject: string;
  readonly request: Req;
  readonly result: Res;
  /**
   * Requests and replies carry bulk bytes after their JSON (packWithBytes in
   * @paddock/bus: a u32 LE length, the JSON, then the raw bytes): file bytes
   * cross the bus as they are, never as base64 inside JSON.
   */
  readonly withBytes?: true;
}

/** The length prefix of a message packed with bytes: the JSON's length, u32 LE. */
export const PACKED_JSON_LENGTH_BYTES = 4;

/** A message of a withBytes rpc: its JSON, then raw bytes. */
export function packWithBytes(json: Uint8Array, bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(PACKED_JSON_LENGTH_BYTES + json.byteLength + bytes.byteLength);
  new DataView(out.buffer).setUint32(0, json.byteLength, true);
  out.set(json, PACKED_JSON_LENGTH_BYTES);
  out.set(bytes, PACKED_JSON_LENGTH_BYTES + json.byteLength);
  return out;
}

/** The JSON and the bytes of a packed message; undefined when it is not one (too short, a length past its end). */
export function unpackWithBytes(data: Uint8Array): { json: Uint8Array; bytes: Uint8Array } | undefined {
  if (data.byteLength < PACKED_JSON_LENGTH_BYTES) return undefined;
  const length = new DataView(data.buffer, data.byteOffset, data.byteLength).getUint32(0, true);
  if (PACKED_JSON_LENGTH_BYTES + length > data.byteLength) return undefined;
  const end = PACKED_JSON_LENGTH_BYTES + length;
  return { json: data.subarray(PACKED_JSON_LENGTH_BYTES, end), bytes: data.subarray(end) };
}
