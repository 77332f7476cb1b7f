import { createHash } from "node:crypto";

/**
 * The KV `tokens` key of a token: its hex sha256. The token itself is never
 * stored or logged. A module of its own (`@paddock/contracts/token-key`), not
 * in the index: the contracts stay free of Node-only modules, so browsers
 * (the web console) and edge runtimes can import them.
 */
export function tokenKey(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}
