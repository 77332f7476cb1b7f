export { main, runProcess, commands } from "./main.ts";
export { loadCliConfig, type CliConfig } from "./config.ts";
export type { CliIo, CliEnv } from "./io.ts";
