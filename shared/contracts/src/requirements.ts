import { z } from "zod";

/** Portable sizing an environment (or host policy) asks of a runner; never from a create request. */
export const Requirements = z
  .object({
    capabilities: z.array(z.string().min(1).max(64)).max(64),
    /** Millicores. */
    minCpuMillis: z.number().int().nonnegative(),
    minMemoryBytes: z.number().int().nonnegative(),
    minDiskBytes: z.number().int().nonnegative(),
  })
  .strict();
export type Requirements = z.infer<typeof Requirements>;

/**
 * The capability of a runner that roots sessions in OCI images (its sandbox
 * backend can): a session whose spec names an image requires it.
 */
export const IMAGE_CAPABILITY = "image:oci";

export const NO_REQUIREMENTS: Requirements = { capabilities: [], minCpuMillis: 0, minMemoryBytes: 0, minDiskBytes: 0 };

/** A stored requirements record with a partial one laid over it, field by field. */
export function mergeRequirements(base: Requirements, patch: Partial<Requirements> | undefined): Requirements {
  return {
    capabilities: [...(patch?.capabilities ?? base.capabilities)],
    minCpuMillis: patch?.minCpuMillis ?? base.minCpuMillis,
    minMemoryBytes: patch?.minMemoryBytes ?? base.minMemoryBytes,
    minDiskBytes: patch?.minDiskBytes ?? base.minDiskBytes,
  };
}
