import type { Descriptor } from "@paddock/oci";
import type { ResolvedManifest } from "./manifest.ts";

/** Where an image's blobs come from (a registry, a layout directory, a docker-archive); resolved to one manifest. */
export interface ImageSource extends ResolvedManifest {
  /** Names the source in errors and logs (registry host and repository, or "layout"); never a credential. */
  what: string;
  /** The blob's bytes as the source has them; the caller verifies them against desc. */
  blob(desc: Descriptor): Promise<AsyncIterable<Uint8Array>>;
  /** Releases what the source holds (a docker-archive's extracted files). */
  dispose(): Promise<void>;
}
