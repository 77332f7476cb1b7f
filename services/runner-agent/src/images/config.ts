import { z } from "zod";

/** The runner's image settings; the runner's config will carry them (wiring is a later step). */
export const ImagesConfig = z.object({
  /** host[:port] of registries reached over plain HTTP (a loopback registry, a local mirror). */
  insecureRegistries: z.array(z.string().min(1).max(255)).max(64).default([]),
  /** Request to response headers. */
  requestTimeoutMs: z.number().int().positive().default(30_000),
  /** Longest pause between two chunks of a body. */
  idleTimeoutMs: z.number().int().positive().default(60_000),
  /** Config plus compressed layers of one image. */
  maxImageBytes: z.number().int().positive().default(8 * 1024 ** 3),
  /** Unpacked root filesystems kept; images not in use are evicted, least recently used first, past it. */
  maxCacheBytes: z.number().int().positive().default(32 * 1024 ** 3),
  /** Layer downloads of one image in flight at once. */
  parallelDownloads: z.number().int().min(1).max(16).default(3),
  umociPath: z.string().min(1).default("/usr/bin/umoci"),
});
export type ImagesConfig = z.infer<typeof ImagesConfig>;
