// The grammar of an OCI image reference, as the distribution project defines
// it (github.com/distribution/reference): [host[:port]/]path[:tag][@digest].
// One definition: the API refuses what breaks it (ImageRef in the bodies that
// take an `image`), and the runner's parser splits a reference with the same
// function, so a reference the API took is never refused later at spawn.
import { z } from "zod";

/** Registry, path, tag and digest as written (docker's defaults applied: docker.io, library/, latest). */
export interface ImageRefParts {
  /** host[:port] (docker.io when none was written). */
  registry: string;
  repository: string;
  tag?: string;
  digest?: string;
}

export type ImageRefParse = { ok: true; parts: ImageRefParts } | { ok: false; why: string };

/** Longest reference accepted. */
export const IMAGE_REF_MAX = 512;
/** Longest registry/repository name (distribution's NameTotalLengthMax). */
export const IMAGE_NAME_MAX = 255;
export const DEFAULT_IMAGE_REGISTRY = "docker.io";

const DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const DOMAIN = new RegExp(`^${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*(?::[0-9]{1,5})?$`);
const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[\w][\w.-]{0,127}$/;
/** Only sha256 digests: every registry and layout uses it, and the runner verifies nothing else. */
const DIGEST = /^sha256:[a-f0-9]{64}$/;

function splitDigest(ref: string): { rest: string; digest?: string } | string {
  const at = ref.indexOf("@");
  if (at < 0) return { rest: ref };
  const digest = ref.slice(at + 1);
  if (!DIGEST.test(digest)) return "digest must be sha256:<64 lowercase hex>";
  return { rest: ref.slice(0, at), digest };
}

function splitTag(rest: string): { name: string; tag?: string } | string {
  const colon = rest.lastIndexOf(":");
  if (colon <= rest.lastIndexOf("/")) return { name: rest };
  const tag = rest.slice(colon + 1);
  if (!TAG.test(tag)) return "bad tag (letters, digits, _ . -, not starting with . or -, at most 128)";
  return { name: rest.slice(0, colon), tag };
}

/** Splits and checks a reference; says what is wrong (a short sentence, never the reference itself). */
export function parseImageRef(ref: string): ImageRefParse {
  if (ref.length === 0 || ref.length > IMAGE_REF_MAX) return { ok: false, why: `must be 1 to ${IMAGE_REF_MAX} characters` };
  if (/[\s\0]/.test(ref)) return { ok: false, why: "must not contain whitespace or NUL" };
  const d = splitDigest(ref);
  if (typeof d === "string") return { ok: false, why: d };
  const t = splitTag(d.rest);
  if (typeof t === "string") return { ok: false, why: t };
  const parts = t.name.split("/");
  let registry = DEFAULT_IMAGE_REGISTRY;
  const first = parts[0] ?? "";
  // As docker does: the first component is a host when it has a dot, a port, or is localhost.
  if (parts.length > 1 && (first.includes(".") || first.includes(":") || first === "localhost")) {
    if (!DOMAIN.test(first)) return { ok: false, why: "bad registry host" };
    if (first.includes(":") && Number(first.split(":")[1]) > 65535) return { ok: false, why: "bad registry port" };
    registry = first;
    parts.shift();
  }
  if (parts.length === 0 || parts.some((p) => !PATH_COMPONENT.test(p))) {
    return { ok: false, why: "bad repository name (lowercase letters, digits and . _ - between them, / between components)" };
  }
  if (registry === DEFAULT_IMAGE_REGISTRY && parts.length === 1) parts.unshift("library");
  const repository = parts.join("/");
  if (registry.length + 1 + repository.length > IMAGE_NAME_MAX) return { ok: false, why: `name over ${IMAGE_NAME_MAX} characters` };
  const tag = t.tag ?? (d.digest ? undefined : "latest");
  return { ok: true, parts: { registry, repository, ...(tag ? { tag } : {}), ...(d.digest ? { digest: d.digest } : {}) } };
}

/** An image reference a runner can pull: what `image` of an environment or a session's spec must be. */
export const ImageRef = z
  .string()
  .min(1)
  .max(IMAGE_REF_MAX)
  .superRefine((value, ctx) => {
    // The length is min/max's to report (and in the API doc as such).
    if (value.length === 0 || value.length > IMAGE_REF_MAX) return;
    const parsed = parseImageRef(value);
    if (!parsed.ok) ctx.addIssue({ code: "custom", message: `not an image reference: ${parsed.why}` });
  })
  .describe("An OCI image reference, [host[:port]/]path[:tag][@sha256:<64 hex>]: lowercase path components, a tag of at most 128 word characters, . and -, name at most 255 characters");
