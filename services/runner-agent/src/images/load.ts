// Images from files: an OCI image layout directory, or a `docker save` archive
// (the legacy manifest.json form, or the OCI layout Docker 25+ writes inside it).
import { createHash } from "node:crypto";
import { constants, createReadStream } from "node:fs";
import { open, realpath, stat } from "node:fs/promises";
import { join, sep } from "node:path";
import { createGunzip } from "node:zlib";
import { extractArchive, relativeSegments } from "@paddock/archive";
import {
  type Descriptor,
  digestHex,
  DockerArchiveManifest,
  ImageIndex,
  isDigest,
  MediaType,
  OciLayoutFile,
  REF_NAME_ANNOTATION,
  sha256Digest,
} from "@paddock/oci";
import { ImageError, ImageErrorCode } from "./errors.ts";
import { resolveManifest, type Platform } from "./manifest.ts";
import type { ImageSource } from "./source.ts";
import { verifyBytes } from "./verified-write.ts";

export interface LoadOptions {
  platform: Platform;
  maxImageBytes: number;
}

const MAX_JSON_BYTES = 4 * 1024 * 1024;

/** A regular file's bytes, refusing links (a layout's files are read where they are, never through a symlink). */
async function readRegular(path: string, max: number, what: string): Promise<Buffer> {
  let file;
  try {
    file = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (err) {
    throw new ImageError(ImageErrorCode.notFound, `${what}: ${path.split(sep).slice(-2).join("/")} is missing or not a regular file`, { cause: err });
  }
  try {
    const info = await file.stat();
    if (!info.isFile()) throw new ImageError(ImageErrorCode.unsupported, `${what}: not a regular file`);
    if (info.size > max) throw new ImageError(ImageErrorCode.tooLarge, `${what}: file over ${max} bytes`);
    return await file.readFile();
  } finally {
    await file.close();
  }
}

function parseWith<T>(schema: { safeParse(v: unknown): { success: true; data: T } | { success: false; error: unknown } }, bytes: Buffer, what: string): T {
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString("utf8"));
  } catch (err) {
    throw new ImageError(ImageErrorCode.unsupported, `${what}: not JSON`, { cause: err });
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) throw new ImageError(ImageErrorCode.unsupported, `${what}: unexpected shape`, { cause: parsed.error });
  return parsed.data;
}

function blobPath(dir: string, desc: Descriptor): string {
  return join(dir, "blobs", "sha256", digestHex(desc.digest));
}

async function* fileChunks(path: string): AsyncGenerator<Uint8Array> {
  const file = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  yield* file.createReadStream({ highWaterMark: 256 * 1024 });
}

/** An OCI image layout directory; `tag` picks an image by its ref.name annotation (needed when the layout holds several). */
export async function layoutSource(dir: string, tag: string | undefined, opts: LoadOptions): Promise<ImageSource> {
  const what = "layout";
  parseWith(OciLayoutFile, await readRegular(join(dir, "oci-layout"), 4096, what), `${what} oci-layout`);
  const index = parseWith(ImageIndex, await readRegular(join(dir, "index.json"), MAX_JSON_BYTES, what), `${what} index.json`);
  const candidates = tag === undefined ? index.manifests : index.manifests.filter((d) => d.annotations?.[REF_NAME_ANNOTATION] === tag);
  const [picked, ...more] = candidates;
  if (!picked) throw new ImageError(ImageErrorCode.notFound, `${what} has no image${tag === undefined ? "" : ` tagged ${JSON.stringify(tag.slice(0, 128))}`}`);
  if (more.length > 0) throw new ImageError(ImageErrorCode.invalidReference, `${what} holds ${candidates.length} images: name one by tag`);
  const readDoc = async (desc: Descriptor) => {
    const bytes = await readRegular(blobPath(dir, desc), MAX_JSON_BYTES, what);
    verifyBytes(bytes, desc.digest, desc.size, what);
    return { bytes, mediaType: desc.mediaType };
  };
  const resolved = await resolveManifest(await readDoc(picked), readDoc, { ...opts, what });
  return { ...resolved, what, blob: async (desc) => fileChunks(blobPath(dir, desc)), dispose: async () => undefined };
}

/** A file inside the extracted archive named by a manifest.json path: relative, no `..`, and (through any links) still inside. */
async function insideFile(root: string, path: string, what: string): Promise<string> {
  let real: string;
  try {
    real = await realpath(join(root, ...relativeSegments(path)));
  } catch (err) {
    throw new ImageError(ImageErrorCode.unsupported, `${what}: manifest.json names a missing or unsafe path`, { cause: err });
  }
  if (!real.startsWith(root + sep) || !(await stat(real)).isFile()) throw new ImageError(ImageErrorCode.unsupported, `${what}: manifest.json names a path outside the archive`);
  return real;
}

/** sha256 and size of a file, and whether it is gzipped (layers of `docker save` are plain tars; some tools gzip them). */
async function describeFile(path: string): Promise<{ digest: string; size: number; gzip: boolean }> {
  const hash = createHash("sha256");
  let size = 0;
  let head: number[] = [];
  for await (const chunk of createReadStream(path, { highWaterMark: 256 * 1024 }) as AsyncIterable<Buffer>) {
    if (size === 0) head = [chunk[0] ?? 0, chunk[1] ?? 0];
    size += chunk.length;
    hash.update(chunk);
  }
  return { digest: `sha256:${hash.digest("hex")}`, size, gzip: head[0] === 0x1f && head[1] === 0x8b };
}

/**
 * A `docker save` archive, extracted (with the checkpoint extractor's refusals:
 * no absolute paths, `..`, escaping links or devices) into workDir, which the
 * caller owns and removes. Legacy archives become an OCI manifest built here
 * from the config's and layers' digests, so the same archive has the same identity.
 */
export async function dockerArchiveSource(file: string, workDir: string, tag: string | undefined, opts: LoadOptions): Promise<ImageSource> {
  const what = "docker-archive";
  const head = await open(file, "r").then(async (f) => {
    const buf = Buffer.alloc(2);
    await f.read(buf, 0, 2, 0);
    await f.close();
    return buf;
  });
  const gzip = head[0] === 0x1f && head[1] === 0x8b;
  const input = createReadStream(file);
  try {
    await extractArchive(gzip ? input.pipe(createGunzip()) : input, workDir, { maxEntries: 100_000, maxBytes: opts.maxImageBytes * 2 }, { gzip: false });
  } catch (err) {
    throw new ImageError(ImageErrorCode.unsupported, `${what}: archive refused (${err instanceof Error ? err.message : String(err)})`, { cause: err });
  }
  const root = await realpath(workDir);
  const hasLayout = await stat(join(root, "oci-layout")).then((s) => s.isFile(), () => false);
  if (hasLayout) return layoutSource(root, tag, opts);
  const images = parseWith(DockerArchiveManifest, await readRegular(join(root, "manifest.json"), MAX_JSON_BYTES, what), `${what} manifest.json`);
  const image = tag === undefined ? images[0] : images.find((i) => i.RepoTags?.some((t) => t === tag || t.endsWith(`:${tag}`)));
  if (!image || (tag === undefined && images.length > 1)) throw new ImageError(ImageErrorCode.notFound, `${what}: ${tag === undefined ? "holds several images: name one by tag" : "no image with that tag"}`);
  const files = new Map<string, string>();
  const configPath = await insideFile(root, image.Config, what);
  const configBytes = await readRegular(configPath, MAX_JSON_BYTES, what);
  const config = { mediaType: MediaType.ociConfig, digest: sha256Digest(configBytes), size: configBytes.length };
  files.set(config.digest, configPath);
  const layers: Descriptor[] = [];
  for (const layer of image.Layers) {
    const path = await insideFile(root, layer, what);
    const d = await describeFile(path);
    layers.push({ mediaType: d.gzip ? MediaType.ociLayerGzip : MediaType.ociLayer, digest: d.digest, size: d.size });
    files.set(d.digest, path);
  }
  const manifestBytes = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MediaType.ociManifest, config, layers }));
  const resolved = await resolveManifest({ bytes: manifestBytes }, () => Promise.reject(new Error("no index in a legacy archive")), { ...opts, what });
  return {
    ...resolved,
    what,
    blob: async (desc) => {
      const path = isDigest(desc.digest) ? files.get(desc.digest) : undefined;
      if (!path) throw new ImageError(ImageErrorCode.notFound, `${what} has no blob ${desc.digest}`);
      return fileChunks(path);
    },
    dispose: async () => undefined,
  };
}
