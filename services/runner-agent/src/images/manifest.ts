// From the first manifest document a source serves to the single-platform
// manifest to unpack: an index picks this host's platform, every document is
// checked against the digest and size that named it, and only layer types
// the unpacker handles pass.
import { type Descriptor, ImageIndex, ImageManifest, INDEX_MEDIA_TYPES, LAYER_AS_OCI, MANIFEST_MEDIA_TYPES, MediaType, sha256Digest } from "@paddock/oci";
import { ImageError, ImageErrorCode } from "./errors.ts";
import { verifyBytes } from "./verified-write.ts";

export interface Platform {
  os: string;
  architecture: string;
}

/** This host's platform in OCI terms (Go's GOARCH names). */
export function hostPlatform(): Platform {
  const arch: Record<string, string> = { x64: "amd64", arm64: "arm64", arm: "arm", ia32: "386", ppc64: "ppc64le", s390x: "s390x", riscv64: "riscv64" };
  return { os: "linux", architecture: arch[process.arch] ?? process.arch };
}

export interface ResolvedManifest {
  /** Digest of the single-platform manifest: the image's identity in the cache. */
  digest: string;
  manifest: ImageManifest;
}

interface Document {
  bytes: Buffer;
  /** Content-Type as served, when the source has one. */
  mediaType?: string;
}

const CONFIG_TYPES: readonly string[] = [MediaType.ociConfig, MediaType.dockerConfig];

function parseJson(doc: Document, what: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(doc.bytes.toString("utf8"));
    if (value && typeof value === "object" && !Array.isArray(value)) return value as Record<string, unknown>;
  } catch {
    // reported below
  }
  throw new ImageError(ImageErrorCode.unsupported, `${what} served a manifest that is not a JSON object`);
}

function kindOf(json: Record<string, unknown>, served: string | undefined): "index" | "manifest" {
  const type = typeof json.mediaType === "string" ? json.mediaType : served;
  if (type && INDEX_MEDIA_TYPES.includes(type)) return "index";
  if (type && MANIFEST_MEDIA_TYPES.includes(type)) return "manifest";
  // OCI allows an absent mediaType; the shape tells then.
  if (!json.mediaType && Array.isArray(json.manifests)) return "index";
  if (!json.mediaType && json.config && Array.isArray(json.layers)) return "manifest";
  throw new ImageError(ImageErrorCode.unsupported, `unsupported manifest media type ${JSON.stringify(String(type ?? "none").slice(0, 100))}`);
}

function pickPlatform(index: ImageIndex, platform: Platform, what: string): Descriptor {
  const match = index.manifests.find(
    (d) => MANIFEST_MEDIA_TYPES.includes(d.mediaType) && d.platform?.os === platform.os && d.platform.architecture === platform.architecture,
  );
  if (!match) throw new ImageError(ImageErrorCode.noPlatform, `${what} has no ${platform.os}/${platform.architecture} image`);
  return match;
}

function checkManifest(manifest: ImageManifest, maxImageBytes: number, what: string): void {
  if (!CONFIG_TYPES.includes(manifest.config.mediaType)) {
    throw new ImageError(ImageErrorCode.unsupported, `${what}: config media type ${manifest.config.mediaType} is not an image config`);
  }
  let total = manifest.config.size;
  for (const layer of manifest.layers) {
    if (!LAYER_AS_OCI[layer.mediaType]) throw new ImageError(ImageErrorCode.unsupported, `${what}: unsupported layer media type ${layer.mediaType}`);
    total += layer.size;
  }
  if (total > maxImageBytes) throw new ImageError(ImageErrorCode.tooLarge, `${what}: image is ${total} bytes, over the ${maxImageBytes} allowed`);
}

/**
 * Resolves the first document (already verified against its digest when the
 * reference named one) to a single-platform manifest; `fetchChild` serves a
 * manifest an index points at, which is verified here.
 */
export async function resolveManifest(
  first: Document,
  fetchChild: (desc: Descriptor) => Promise<Document>,
  opts: { platform: Platform; maxImageBytes: number; what: string },
): Promise<ResolvedManifest> {
  let doc = first;
  let json = parseJson(doc, opts.what);
  if (kindOf(json, doc.mediaType) === "index") {
    const index = ImageIndex.safeParse(json);
    if (!index.success) throw new ImageError(ImageErrorCode.unsupported, `${opts.what} served an invalid image index`, { cause: index.error });
    const desc = pickPlatform(index.data, opts.platform, opts.what);
    doc = await fetchChild(desc);
    verifyBytes(doc.bytes, desc.digest, desc.size, opts.what);
    json = parseJson(doc, opts.what);
    if (kindOf(json, doc.mediaType) !== "manifest") throw new ImageError(ImageErrorCode.unsupported, `${opts.what}: an index inside an index`);
  }
  const manifest = ImageManifest.safeParse(json);
  if (!manifest.success) throw new ImageError(ImageErrorCode.unsupported, `${opts.what} served an invalid image manifest`, { cause: manifest.error });
  checkManifest(manifest.data, opts.maxImageBytes, opts.what);
  return { digest: sha256Digest(doc.bytes), manifest: manifest.data };
}
