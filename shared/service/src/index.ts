export { watchEventLoopLag, type LagWatch, type LagWatchOptions } from "./event-loop-lag.ts";
export { startOpsServer, type OpsOptions, type OpsServer } from "./ops.ts";
export { runMain, type Started, type Stoppable } from "./run-main.ts";
export { defineService, runService, type CommonServiceConfig, type ServiceDefinition, type ServiceDeps, type ServiceInstance } from "./define.ts";
export { checkOutboundTarget, guardedLookup, isPublicAddress, PrivateTargetError } from "./outbound.ts";
