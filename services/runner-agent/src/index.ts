export { createRunnerAgent, type RunnerAgent, type RunnerAgentDeps, type AgentConfig } from "./agent.ts";
export { loadConfig, type RunnerConfig } from "./config.ts";
export { createRunnerMetrics, type RunnerMetrics } from "./metrics.ts";
export { TermWriter, MAX_CHUNK_BYTES } from "./term-writer.ts";
export { dispatchConsumerName } from "./registration.ts";
