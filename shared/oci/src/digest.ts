import { createHash } from "node:crypto";

/** `sha256:` and 64 lowercase hex digits: the only digest algorithm accepted (every registry and layout uses it). */
export const DIGEST_RE = /^sha256:[a-f0-9]{64}$/;

export function isDigest(value: string): boolean {
  return DIGEST_RE.test(value);
}

export function sha256Digest(data: Uint8Array | string): string {
  return `sha256:${createHash("sha256").update(data).digest("hex")}`;
}

/** The hex part of a digest, for file names (blobs/sha256/<hex>); the caller has checked it with isDigest. */
export function digestHex(digest: string): string {
  return digest.slice("sha256:".length);
}
