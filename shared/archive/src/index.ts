export * from "./archive.ts";
export * from "./errors.ts";
export * from "./paths.ts";
export * from "./sealed.ts";
export * from "./parallel-gzip.ts";
export { DESCRIPTOR_RELATIVE, DirFd, type FileOwner } from "./dir-fd.ts";
export type { PackHooks } from "./pack.ts";
export type { UnpackHooks } from "./unpack.ts";
export { FileTooLargeError, writeFresh } from "./fresh-file.ts";
