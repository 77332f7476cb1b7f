/**
 * Byte counts of strings without Node's Buffer: the contracts run in
 * browsers and edge runtimes too (the console, @paddock/sdk). Each gives
 * what `Buffer.byteLength` gives for the same string.
 */

const encoder = new TextEncoder();

/** UTF-8 bytes of s (a lone surrogate counts as U+FFFD's three, as Buffer counts it). */
export function utf8ByteLength(s: string): number {
  return encoder.encode(s).byteLength;
}

/** Bytes that base64 text decodes to: 3 per 4 characters, less its `=` padding (Buffer.byteLength(s, "base64")). */
export function base64ByteLength(s: string): number {
  let n = s.length;
  if (n > 0 && s.charCodeAt(n - 1) === 0x3d) n--;
  if (n > 1 && s.charCodeAt(n - 1) === 0x3d) n--;
  return (n * 3) >>> 2;
}
