/**
 * @paddock/openai-agents: Paddock sessions as sandboxes of the OpenAI Agents
 * SDK (`SandboxAgent`, `run(agent, input, { sandbox: { client } })`).
 */
export { PaddockSandboxClient, type PaddockSandboxClientOptions } from "./client.ts";
export { OnClose, PaddockSandboxSession, type PaddockSandboxSessionState } from "./session.ts";
export { PaddockEditor } from "./editor.ts";
export { PROVIDER } from "./errors.ts";
