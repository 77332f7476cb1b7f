// The parts of OCI/Docker manifests, indexes and configs the runner reads; unknown fields pass through.
import { z } from "zod";
import { DIGEST_RE } from "./digest.ts";

export const Descriptor = z.looseObject({
  mediaType: z.string().min(1).max(255),
  digest: z.string().regex(DIGEST_RE, "digest must be sha256:<64 hex>"),
  size: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
  annotations: z.record(z.string(), z.string()).optional(),
  platform: z
    .looseObject({
      architecture: z.string(),
      os: z.string(),
      variant: z.string().optional(),
    })
    .optional(),
});
export type Descriptor = z.infer<typeof Descriptor>;

export const ImageIndex = z.looseObject({
  schemaVersion: z.literal(2),
  mediaType: z.string().optional(),
  manifests: z.array(Descriptor).max(1024),
});
export type ImageIndex = z.infer<typeof ImageIndex>;

export const ImageManifest = z.looseObject({
  schemaVersion: z.literal(2),
  mediaType: z.string().optional(),
  config: Descriptor,
  layers: z.array(Descriptor).max(1024),
});
export type ImageManifest = z.infer<typeof ImageManifest>;

/** What a session would run with (used when images back sessions); the rest of the config passes through. */
export const ImageConfig = z.looseObject({
  architecture: z.string(),
  os: z.string(),
  config: z
    .looseObject({
      Env: z.array(z.string()).nullish(),
      Entrypoint: z.array(z.string()).nullish(),
      Cmd: z.array(z.string()).nullish(),
      WorkingDir: z.string().nullish(),
      User: z.string().nullish(),
    })
    .nullish(),
  rootfs: z.looseObject({ type: z.literal("layers"), diff_ids: z.array(z.string()) }),
});
export type ImageConfig = z.infer<typeof ImageConfig>;

/** `oci-layout` at the root of an OCI image layout directory. */
export const OciLayoutFile = z.looseObject({ imageLayoutVersion: z.string() });

/** One image of a `docker save` archive's manifest.json. */
export const DockerArchiveManifest = z
  .array(
    z.looseObject({
      Config: z.string().min(1),
      RepoTags: z.array(z.string()).nullish(),
      Layers: z.array(z.string().min(1)).max(1024),
    }),
  )
  .min(1);
export type DockerArchiveManifest = z.infer<typeof DockerArchiveManifest>;

/** The annotation naming a tag in an OCI layout's index.json (what umoci's `dir:tag` reads). */
export const REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name";
