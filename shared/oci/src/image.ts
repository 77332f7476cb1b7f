// Builds an image in memory (config, layers, manifest) and writes it as an OCI
// layout directory: what tests and benchmarks push to a registry or load.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { digestHex, sha256Digest } from "./digest.ts";
import { MediaType } from "./media-types.ts";
import { REF_NAME_ANNOTATION, type Descriptor } from "./schemas.ts";
import { writeTar, type TarEntry } from "./tar-writer.ts";

/** One blob and its descriptor. */
export interface Blob {
  descriptor: Descriptor;
  data: Buffer;
}

export interface BuiltImage {
  config: Blob;
  layers: Blob[];
  /** The manifest's bytes and descriptor; its digest is the image's identity. */
  manifest: Blob;
}

export interface BuildImageOptions {
  /** Each layer's entries, lowest first. */
  layers: ReadonlyArray<readonly TarEntry[]>;
  /** gzip the layers (the usual registry form); plain tar otherwise. */
  gzip?: boolean;
  /** Docker v2 schema 2 media types instead of OCI ones. */
  docker?: boolean;
  cmd?: string[];
  entrypoint?: string[];
  env?: string[];
  workingDir?: string;
  user?: string;
  architecture?: string;
}

function blob(mediaType: string, data: Buffer): Blob {
  return { descriptor: { mediaType, digest: sha256Digest(data), size: data.length }, data };
}

export function buildImage(opts: BuildImageOptions): BuiltImage {
  const tars = opts.layers.map((entries) => writeTar(entries));
  const layerType = opts.docker ? MediaType.dockerLayerGzip : opts.gzip ? MediaType.ociLayerGzip : MediaType.ociLayer;
  const layers = tars.map((tar) => blob(layerType, opts.gzip || opts.docker ? gzipSync(tar, { level: 1 }) : tar));
  const configJson = {
    architecture: opts.architecture ?? "amd64",
    os: "linux",
    config: {
      Env: opts.env ?? ["PATH=/bin"],
      Cmd: opts.cmd ?? ["/bin/sh"],
      ...(opts.entrypoint ? { Entrypoint: opts.entrypoint } : {}),
      ...(opts.workingDir ? { WorkingDir: opts.workingDir } : {}),
      ...(opts.user ? { User: opts.user } : {}),
    },
    rootfs: { type: "layers", diff_ids: tars.map((tar) => sha256Digest(tar)) },
  };
  const config = blob(opts.docker ? MediaType.dockerConfig : MediaType.ociConfig, Buffer.from(JSON.stringify(configJson)));
  const manifestType = opts.docker ? MediaType.dockerManifest : MediaType.ociManifest;
  const manifestJson = {
    schemaVersion: 2,
    mediaType: manifestType,
    config: config.descriptor,
    layers: layers.map((l) => l.descriptor),
  };
  return { config, layers, manifest: blob(manifestType, Buffer.from(JSON.stringify(manifestJson))) };
}

/** An index (OCI or Docker manifest list) over per-platform manifests. */
export function buildIndex(entries: ReadonlyArray<{ image: BuiltImage; architecture: string }>, docker = false): Blob {
  const mediaType = docker ? MediaType.dockerManifestList : MediaType.ociIndex;
  const json = {
    schemaVersion: 2,
    mediaType,
    manifests: entries.map((e) => ({ ...e.image.manifest.descriptor, platform: { architecture: e.architecture, os: "linux" } })),
  };
  return blob(mediaType, Buffer.from(JSON.stringify(json)));
}

/** Writes images as an OCI layout at dir, each tagged in index.json. */
export function writeOciLayout(dir: string, tagged: ReadonlyArray<{ tag: string; image: BuiltImage }>): void {
  mkdirSync(join(dir, "blobs", "sha256"), { recursive: true });
  writeFileSync(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  for (const { image } of tagged) {
    for (const b of [image.config, ...image.layers, image.manifest]) {
      writeFileSync(join(dir, "blobs", "sha256", digestHex(b.descriptor.digest)), b.data);
    }
  }
  const index = {
    schemaVersion: 2,
    mediaType: MediaType.ociIndex,
    manifests: tagged.map(({ tag, image }) => ({ ...image.manifest.descriptor, annotations: { [REF_NAME_ANNOTATION]: tag } })),
  };
  writeFileSync(join(dir, "index.json"), JSON.stringify(index));
}
