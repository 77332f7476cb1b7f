// Image references as the distribution project defines them
// (github.com/distribution/reference): [host[:port]/]path[:tag][@digest].
import { isDigest } from "@paddock/oci";
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

const DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const DOMAIN = new RegExp(`^${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*(?::[0-9]{1,5})?$`);
const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const MAX_NAME = 255;
const DEFAULT_REGISTRY = "docker.io";

function invalid(ref: string, why: string): ImageError {
  // The reference is client input: quoted with a length cap, never raw in full.
  return new ImageError(ImageErrorCode.invalidReference, `invalid image reference ${JSON.stringify(ref.slice(0, 80))}: ${why}`);
}

/** Parses a reference; throws ImageError(invalid_reference) saying what is wrong. */
export function parseReference(ref: string): ImageReference {
  if (ref.length === 0 || ref.length > 512) throw invalid(ref, "must be 1 to 512 characters");
  if (/[\s\0]/.test(ref)) throw invalid(ref, "must not contain whitespace or NUL");
  let rest = ref;
  let digest: string | undefined;
  const at = rest.indexOf("@");
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!isDigest(digest)) throw invalid(ref, "digest must be sha256:<64 lowercase hex>");
  }
  let tag: string | undefined;
  const lastSlash = rest.lastIndexOf("/");
  const colon = rest.lastIndexOf(":");
  if (colon > lastSlash) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw invalid(ref, "bad tag");
  }
  const parts = rest.split("/");
  let registry = DEFAULT_REGISTRY;
  const first = parts[0] ?? "";
  // As docker does: the first component is a host when it has a dot, a port, or is localhost.
  if (parts.length > 1 && (first.includes(".") || first.includes(":") || first === "localhost")) {
    if (!DOMAIN.test(first)) throw invalid(ref, "bad registry host");
    const port = first.includes(":") ? Number(first.split(":")[1]) : 0;
    if (port > 65535) throw invalid(ref, "bad registry port");
    registry = first;
    parts.shift();
  }
  if (parts.length === 0 || parts.some((p) => !PATH_COMPONENT.test(p))) throw invalid(ref, "bad repository name");
  if (registry === DEFAULT_REGISTRY && parts.length === 1) parts.unshift("library");
  const repository = parts.join("/");
  if (registry.length + 1 + repository.length > MAX_NAME) throw invalid(ref, "name too long");
  if (!tag && !digest) tag = "latest";
  const canonical = `${registry}/${repository}${tag ? `:${tag}` : ""}${digest ? `@${digest}` : ""}`;
  const apiHost = registry === DEFAULT_REGISTRY ? "registry-1.docker.io" : registry;
  return { registry, apiHost, repository, canonical, ...(tag ? { tag } : {}), ...(digest ? { digest } : {}) };
}
