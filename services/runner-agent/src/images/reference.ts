// Image references: the grammar is the contract's (parseImageRef, the same the
// API checks bodies with); this adds where the API is served and a normal form.
import { DEFAULT_IMAGE_REGISTRY, parseImageRef } from "@paddock/contracts";
import { ImageError, ImageErrorCode } from "./errors.ts";

export interface ImageReference {
  /** host[:port] as written (docker.io when none was). */
  registry: string;
  /** The host the API is served on (registry-1.docker.io for docker.io). */
  apiHost: string;
  repository: string;
  tag?: string;
  digest?: string;
  /** Normal form: registry/repository[:tag][@digest], tag `latest` when neither was given. */
  canonical: string;
}

/** Parses a reference; throws ImageError(invalid_reference) saying what is wrong. */
export function parseReference(ref: string): ImageReference {
  const parsed = parseImageRef(ref);
  if (!parsed.ok) {
    // The reference is client input: quoted with a length cap, never raw in full.
    throw new ImageError(ImageErrorCode.invalidReference, `invalid image reference ${JSON.stringify(ref.slice(0, 80))}: ${parsed.why}`);
  }
  const { registry, repository, tag, digest } = parsed.parts;
  const canonical = `${registry}/${repository}${tag ? `:${tag}` : ""}${digest ? `@${digest}` : ""}`;
  const apiHost = registry === DEFAULT_IMAGE_REGISTRY ? "registry-1.docker.io" : registry;
  return { registry, apiHost, repository, canonical, ...(tag ? { tag } : {}), ...(digest ? { digest } : {}) };
}
