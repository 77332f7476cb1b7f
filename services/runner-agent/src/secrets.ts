/** Which session and environment asks, so a resolver can authorize the lookup. */
export interface SecretContext {
  workspaceId: string;
  sessionId: string;
  environmentId: string;
}

/**
 * Turns an environment's secretRefs into env-var values for init and the
 * apps. Values never reach a log, a fact or the terminal log. The seam for a
 * later issue: the default resolves nothing.
 */
export interface SecretResolver {
  resolve(refs: readonly string[], ctx: SecretContext): Promise<Record<string, string>>;
}

export const noSecrets: SecretResolver = {
  resolve: () => Promise.resolve({}),
};
