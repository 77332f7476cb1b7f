// A registry as an image source: the reference resolved to one manifest over
// the distribution API, blobs streamed on demand.
import type { Platform } from "./manifest.ts";
import { resolveManifest } from "./manifest.ts";
import type { ImageReference } from "./reference.ts";
import type { RegistryClient } from "./registry-client.ts";
import type { ImageSource } from "./source.ts";
import { verifyBytes } from "./verified-write.ts";

export async function registrySource(client: RegistryClient, ref: ImageReference, opts: { platform: Platform; maxImageBytes: number }): Promise<ImageSource> {
  const what = `${ref.registry}/${ref.repository}`;
  const first = await client.manifest(ref, ref.digest ?? ref.tag ?? "latest");
  if (ref.digest) verifyBytes(first.bytes, ref.digest, undefined, what);
  const resolved = await resolveManifest(first, (desc) => client.manifest(ref, desc.digest), { ...opts, what });
  return {
    ...resolved,
    what,
    blob: (desc) => client.blob(ref, desc.digest),
    dispose: async () => undefined,
  };
}
