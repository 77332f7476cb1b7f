export { createRunnerAgent, type RunnerAgent, type RunnerAgentDeps, type AgentConfig } from "./agent.ts";
export { loadConfig, type RunnerConfig } from "./config.ts";
export { createRunnerMetrics, type RunnerMetrics } from "./metrics.ts";
export { TermWriter } from "./terminal/term-writer.ts";
export { OutputStream } from "./sandbox/process-group.ts";
export { RpcSecretResolver, noSecrets, type SecretResolver, type SecretContext } from "./sessions/secrets.ts";
export { dispatchConsumerName } from "./fleet/dispatch-consumer.ts";
