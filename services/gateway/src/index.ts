export { createGateway, type Gateway } from "./gateway.ts";
export { loadConfig, defaultConfig, type GatewayConfig } from "./config.ts";
export { createGatewayMetrics, type GatewayMetrics } from "./metrics.ts";
export { hashToken, seedToken, seedMember, seedDevToken, Authorizer, Action } from "./auth/auth.ts";
export type { GatewayDeps } from "./context.ts";
export { LOG_CURSOR_HEADER } from "@paddock/contracts";
