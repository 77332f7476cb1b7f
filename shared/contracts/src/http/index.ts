export * from "./route.ts";
export * from "./query.ts";
export * from "./routes.ts";
export * from "./files.ts";
export * from "./agent-routes.ts";
