export * from "./nats-server.ts";
export * from "./process.ts";
