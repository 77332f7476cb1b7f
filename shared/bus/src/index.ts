export * from "./connect.ts";
export * from "./codec.ts";
export * from "./consume.ts";
export * from "./errors.ts";
export * from "./metrics.ts";
export * from "./provision.ts";
export * from "./rpc.ts";
export * from "./secret-box.ts";
