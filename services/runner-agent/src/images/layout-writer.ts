// Writes an image from any source as an OCI layout umoci can unpack: every
// blob comes from the content-addressed blob store (downloaded there, verified,
// unless it is there already) and is hard-linked into the layout; Docker media
// types are rewritten to their OCI equals (umoci reads only OCI); the image is
// tagged "image" in index.json.
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { digestHex, ImageConfig, LAYER_AS_OCI, MediaType, REF_NAME_ANNOTATION, sha256Digest, type Descriptor } from "@paddock/oci";
import type { BlobStore } from "./blob-store.ts";
import { ImageError, ImageErrorCode } from "./errors.ts";
import type { Platform } from "./manifest.ts";
import type { ImageSource } from "./source.ts";

export const LAYOUT_TAG = "image";

export interface WrittenLayout {
  dir: string;
  config: ImageConfig;
  configBytes: Buffer;
}

/**
 * Runs work over items, `limit` at a time. After a failure no new item starts,
 * and the first error is thrown only once the ones in progress have ended: a
 * failed pull leaves no download still writing under tmp/ behind it.
 */
async function inParallel<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const errors: unknown[] = [];
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length && errors.length === 0) {
      await work(items[next++] as T).catch((err: unknown) => errors.push(err));
    }
  });
  await Promise.all(workers);
  if (errors.length > 0) throw errors[0];
}

export async function writeLayout(
  source: ImageSource,
  dir: string,
  opts: { platform: Platform; parallelDownloads: number; store: BlobStore },
): Promise<WrittenLayout> {
  const blobs = join(dir, "blobs", "sha256");
  await mkdir(blobs, { recursive: true });
  const fetchBlob = async (desc: Descriptor) => {
    await opts.store.ensure(source, desc);
    await opts.store.linkTo(desc.digest, join(blobs, digestHex(desc.digest)));
  };
  const { manifest } = source;
  await fetchBlob(manifest.config);
  const configBytes = await readFile(join(blobs, digestHex(manifest.config.digest)));
  const config = parseConfig(configBytes, source.what, opts.platform);
  const unique = [...new Map(manifest.layers.map((l) => [l.digest, l])).values()];
  await inParallel(unique, opts.parallelDownloads, fetchBlob);
  const oci = {
    schemaVersion: 2,
    mediaType: MediaType.ociManifest,
    config: { mediaType: MediaType.ociConfig, digest: manifest.config.digest, size: manifest.config.size },
    layers: manifest.layers.map((l) => ({ mediaType: LAYER_AS_OCI[l.mediaType] ?? l.mediaType, digest: l.digest, size: l.size })),
  };
  const manifestBytes = Buffer.from(JSON.stringify(oci));
  const manifestDigest = sha256Digest(manifestBytes);
  await writeFile(join(blobs, digestHex(manifestDigest)), manifestBytes);
  const index = {
    schemaVersion: 2,
    mediaType: MediaType.ociIndex,
    manifests: [{ mediaType: MediaType.ociManifest, digest: manifestDigest, size: manifestBytes.length, annotations: { [REF_NAME_ANNOTATION]: LAYOUT_TAG } }],
  };
  await writeFile(join(dir, "index.json"), JSON.stringify(index));
  await writeFile(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  return { dir, config, configBytes };
}

function parseConfig(bytes: Buffer, what: string, platform: Platform): ImageConfig {
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString("utf8"));
  } catch (err) {
    throw new ImageError(ImageErrorCode.unsupported, `${what}: image config is not JSON`, { cause: err });
  }
  const parsed = ImageConfig.safeParse(json);
  if (!parsed.success) throw new ImageError(ImageErrorCode.unsupported, `${what}: invalid image config`, { cause: parsed.error });
  if (parsed.data.os !== platform.os || parsed.data.architecture !== platform.architecture) {
    throw new ImageError(ImageErrorCode.noPlatform, `${what} is a ${parsed.data.os}/${parsed.data.architecture} image, not ${platform.os}/${platform.architecture}`);
  }
  return parsed.data;
}
