export * from "./nats-server.ts";
export * from "./process.ts";
export * from "./stack.ts";
export * from "./nats-auth.ts";
export * from "./nats-cluster.ts";
export * from "./scratch.ts";
export * from "./script-args.ts";
