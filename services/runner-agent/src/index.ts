export { createRunnerAgent, type RunnerAgent, type RunnerAgentDeps, type AgentConfig } from "./agent.ts";
export { loadConfig, type RunnerConfig } from "./config.ts";
export { createRunnerMetrics, type RunnerMetrics } from "./metrics.ts";
export { TermWriter, MAX_CHUNK_BYTES, OutputStream } from "./term-writer.ts";
export { RpcSecretResolver, noSecrets, type SecretResolver, type SecretContext } from "./secrets.ts";
export { dispatchConsumerName } from "./dispatch-consumer.ts";
