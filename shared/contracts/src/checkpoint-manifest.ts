/**
 * An incremental checkpoint (docs/decisions/0062): a manifest of the
 * workspace's entries, sealed like any checkpoint object, whose files are
 * lists of chunks stored apart in runners' chunk streams. The runner writes
 * it, a runner restores it, the scheduler's collector reads which chunks it
 * keeps alive: one definition for all three.
 */
import { z } from "zod";

/** `Checkpoint.format` of a sealed manifest (gzipped JSON, sealed as `tar+aes256gcm` objects are). */
export const MANIFEST_FORMAT = "manifest+aes256gcm";

/** A file is cut into chunks of this many bytes (the last one shorter); a changed file stores only its changed chunks. */
export const MANIFEST_CHUNK_BYTES = 1024 * 1024;

const Base64Url256 = z.string().regex(/^[A-Za-z0-9_-]{43}$/, "must be 32 bytes of base64url");
const Base64Key = z.string().regex(/^[A-Za-z0-9+/]{43}=$/, "must be 32 bytes of base64");
/** Paths are walked by descriptor, so they may be longer than PATH_MAX; this bounds a hostile tree's manifest. */
const RelPath = z
  .string()
  .min(1)
  .max(32_768)
  .refine((p) => !p.startsWith("/") && !p.includes("\0") && !p.split("/").some((s) => s === "" || s === "." || s === ".."), "must be a relative path without . or .. segments");
const Mode = z.number().int().min(0).max(0o7777);

/** One stored chunk of a file: where it is, how to open it, and what it held (for reuse by a later checkpoint). */
export const ManifestChunk = z
  .object({
    /** The chunk stream holding it (`runnerChunkStream` of the runner that stored it). */
    stream: z.string().regex(/^chunks-runner-[A-Za-z0-9_-]+$/),
    /** sha256 of the sealed chunk's IV and GCM tag: its subject's last token, one per stored content. */
    id: Base64Url256,
    /** The chunk's own AES-256-GCM key: only in sealed manifests, never in the store. */
    key: Base64Key,
    /** sha256 of the plain bytes: a later checkpoint of the same lineage reuses the chunk for the same bytes. */
    sha256: Base64Url256,
    bytes: z.number().int().min(1).max(MANIFEST_CHUNK_BYTES),
  })
  .strict();
export type ManifestChunk = z.infer<typeof ManifestChunk>;

export const ManifestEntry = z.discriminatedUnion("type", [
  z.object({ type: z.literal("dir"), path: RelPath, mode: Mode }).strict(),
  z
    .object({
      type: z.literal("file"),
      path: RelPath,
      mode: Mode,
      size: z.number().int().nonnegative(),
      mtimeMs: z.number().nonnegative(),
      chunks: z.array(ManifestChunk),
    })
    .strict(),
  z.object({ type: z.literal("symlink"), path: RelPath, target: z.string().min(1).max(4096), mtimeMs: z.number().nonnegative() }).strict(),
  /** A hard link to an earlier file entry of the same manifest. */
  z.object({ type: z.literal("link"), path: RelPath, target: RelPath }).strict(),
]);
export type ManifestEntry = z.infer<typeof ManifestEntry>;

/** Entries in walk order: every directory before what it holds. */
export const CheckpointManifest = z.object({ version: z.literal(1), entries: z.array(ManifestEntry) }).strict();
export type CheckpointManifest = z.infer<typeof CheckpointManifest>;

/** Every chunk a manifest refers to, as `<stream>/<id>`. */
export function manifestChunkRefs(manifest: CheckpointManifest): Set<string> {
  const refs = new Set<string>();
  for (const entry of manifest.entries) if (entry.type === "file") for (const c of entry.chunks) refs.add(`${c.stream}/${c.id}`);
  return refs;
}
