// OCI and Docker media types the runner reads; one definition for the pull, the loaders and the image builders of tests.
export const MediaType = {
  ociIndex: "application/vnd.oci.image.index.v1+json",
  ociManifest: "application/vnd.oci.image.manifest.v1+json",
  ociConfig: "application/vnd.oci.image.config.v1+json",
  ociLayer: "application/vnd.oci.image.layer.v1.tar",
  ociLayerGzip: "application/vnd.oci.image.layer.v1.tar+gzip",
  ociLayerZstd: "application/vnd.oci.image.layer.v1.tar+zstd",
  ociLayerNondistributableGzip: "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
  dockerManifestList: "application/vnd.docker.distribution.manifest.list.v2+json",
  dockerManifest: "application/vnd.docker.distribution.manifest.v2+json",
  dockerConfig: "application/vnd.docker.container.image.v1+json",
  dockerLayerGzip: "application/vnd.docker.image.rootfs.diff.tar.gzip",
  dockerForeignLayerGzip: "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
} as const;
export type MediaType = (typeof MediaType)[keyof typeof MediaType];

/** Manifest lists: an image per platform. */
export const INDEX_MEDIA_TYPES: readonly string[] = [MediaType.ociIndex, MediaType.dockerManifestList];
/** Single-platform manifests. */
export const MANIFEST_MEDIA_TYPES: readonly string[] = [MediaType.ociManifest, MediaType.dockerManifest];

/**
 * Layer media types and the OCI type umoci unpacks them as; anything else
 * (zstd, which umoci 0.4 lacks; foreign layers, which name URLs) is refused.
 */
export const LAYER_AS_OCI: Readonly<Record<string, string>> = {
  [MediaType.ociLayer]: MediaType.ociLayer,
  [MediaType.ociLayerGzip]: MediaType.ociLayerGzip,
  [MediaType.dockerLayerGzip]: MediaType.ociLayerGzip,
};

/** The Accept header of a manifest request: every type above, so a registry never downgrades to schema 1. */
export const MANIFEST_ACCEPT = [...INDEX_MEDIA_TYPES, ...MANIFEST_MEDIA_TYPES].join(", ");
