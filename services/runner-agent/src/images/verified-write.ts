// Writes a blob to a file while checking it against its descriptor: bytes past
// the declared size stop the copy at once, and a short or altered blob is
// refused at the end. A refused or failed blob leaves no file behind.
import { createHash } from "node:crypto";
import { open, rm } from "node:fs/promises";
import type { Descriptor } from "@paddock/oci";
import { ImageError, ImageErrorCode } from "./errors.ts";

/** `what` names the blob's source in the message (a registry host or "layout"), never a URL with parameters. */
export async function writeVerified(chunks: AsyncIterable<Uint8Array>, desc: Descriptor, path: string, what: string): Promise<void> {
  const hash = createHash("sha256");
  let size = 0;
  const file = await open(path, "wx", 0o644);
  try {
    try {
      for await (const chunk of chunks) {
        size += chunk.length;
        if (size > desc.size) throw mismatch(what, desc, `more than its ${desc.size} bytes`);
        hash.update(chunk);
        await file.write(chunk);
      }
    } finally {
      await file.close();
    }
    if (size !== desc.size) throw mismatch(what, desc, `${size} bytes, not ${desc.size}`);
    const got = `sha256:${hash.digest("hex")}`;
    if (got !== desc.digest) throw mismatch(what, desc, `content hashes to ${got}`);
  } catch (err) {
    await rm(path, { force: true });
    throw err;
  }
}

function mismatch(what: string, desc: Descriptor, detail: string): ImageError {
  return new ImageError(ImageErrorCode.digestMismatch, `${what} served blob ${desc.digest} with ${detail}`);
}

/** Checks bytes held in memory (manifests, configs) against a digest and optional size. */
export function verifyBytes(bytes: Uint8Array, digest: string, size: number | undefined, what: string): void {
  if (size !== undefined && bytes.length !== size) {
    throw new ImageError(ImageErrorCode.digestMismatch, `${what} served ${digest} with ${bytes.length} bytes, not ${size}`);
  }
  const got = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
  if (got !== digest) throw new ImageError(ImageErrorCode.digestMismatch, `${what} served ${digest} with content hashing to ${got}`);
}
