/**
 * @paddock/sdk: a typed client of Paddock's public API. ESM, web platform
 * APIs only (fetch, streams, web crypto): browsers, edge runtimes and Node.
 */
export { Agents } from "./agents.ts";
export { Webhooks } from "./webhooks.ts";
export { Paddock, Sessions, Environments, Exec, Files, Events, Terminals, type CallOptions, type CreateSessionInput, type ExecInput, type FollowOptions } from "./client.ts";
export { Transport, errorOf, ndjson, type CallInput, type PaddockOptions, type SendOptions } from "./transport.ts";
export * from "./errors.ts";
export { Terminal, type AttachOptions, type SocketConstructor, type SocketLike, type TerminalItem } from "./terminal.ts";
