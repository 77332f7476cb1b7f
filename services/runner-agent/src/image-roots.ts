/**
 * The runner's image store as the sandbox seam's SandboxImages: a pull's
 * lease is held for the session (eviction never removes a root in use), the
 * image's config becomes what the session runs with (run-config.ts), and an
 * ImageError becomes a SpawnError whose message is the session's failed
 * reason (the store's messages name no credential).
 */
import { SpawnError } from "./errors.ts";
import { ImageError, runConfigOf, type ImageStore } from "./images/index.ts";
import type { ImageRoot, SandboxImages } from "./sandbox/backend.ts";

export function sandboxImages(store: ImageStore): SandboxImages {
  return {
    async acquire(reference: string): Promise<ImageRoot> {
      try {
        const lease = await store.pull(reference);
        try {
          return { rootfs: lease.image.rootfs, config: runConfigOf(lease.image.config), release: () => lease.release() };
        } catch (err) {
          lease.release();
          throw err;
        }
      } catch (err) {
        const why = err instanceof ImageError ? err.message : "could not be pulled";
        throw new SpawnError(`image ${reference.slice(0, 256)}: ${why}`, { cause: err });
      }
    },
  };
}
