export * from "./digest.ts";
export * from "./image.ts";
export * from "./media-types.ts";
export * from "./push.ts";
export * from "./schemas.ts";
export * from "./tar-writer.ts";
