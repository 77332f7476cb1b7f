/**
 * The little of `oidc-provider` (which ships no types) the test kit uses:
 * a Provider built from an issuer and a configuration, serving its routes
 * through a Node request handler.
 */
declare module "oidc-provider" {
  import type { IncomingMessage, ServerResponse } from "node:http";

  export interface AccountClaims {
    sub: string;
    [claim: string]: unknown;
  }
  export interface Account {
    accountId: string;
    claims(use: string, scope: string): AccountClaims | Promise<AccountClaims>;
  }

  export default class Provider {
    constructor(issuer: string, configuration: Record<string, unknown>);
    callback(): (req: IncomingMessage, res: ServerResponse) => void;
  }
}
