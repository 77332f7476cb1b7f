export * from "./archive.ts";
export * from "./errors.ts";
export * from "./paths.ts";
export * from "./sealed.ts";
export * from "./parallel-gzip.ts";
