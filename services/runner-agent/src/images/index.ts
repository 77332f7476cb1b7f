export { ImagesConfig } from "./config.ts";
export { ImageError, ImageErrorCode, type ImageErrorStatus } from "./errors.ts";
export { hostPlatform, type Platform } from "./manifest.ts";
export { parseReference, type ImageReference } from "./reference.ts";
export type { RegistryCredentials } from "./registry-client.ts";
export { imageEnv, runConfigOf, type RunConfig } from "./run-config.ts";
export { createImageStore, type CachedImage, type ImageEvent, type ImageLease, type ImageStore, type ImageStoreDeps, type LoadRequest } from "./store.ts";
