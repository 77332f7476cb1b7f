import type { NatsConnection } from "@nats-io/transport-node";
import { callRpc, SecretBox } from "@paddock/bus";
import { FleetRpc, PaddockError, SecretName, secretKey, UnavailableError, type SessionSecretsReply, type SessionSecretsRequest } from "@paddock/contracts";
import { BootError } from "../errors.ts";

/** Which placement of which session asks, so the scheduler can authorize the lookup. */
export interface SecretContext {
  workspaceId: string;
  sessionId: string;
  placementGeneration: number;
  environmentId?: string | undefined;
}

/**
 * Turns an environment's secretRefs into env-var values for init and the
 * apps. Values never reach a log, a fact or the terminal log. noSecrets
 * resolves nothing (unit tests); main.ts wires KvSecretResolver.
 */
export interface SecretResolver {
  resolve(refs: readonly string[], ctx: SecretContext): Promise<Record<string, string>>;
  /**
   * What a boot needs in one call: the values of `refs` and the session's
   * service token for this placement (undefined when none is given). A
   * secret: never logged.
   */
  boot(refs: readonly string[], ctx: SecretContext): Promise<BootSecrets>;
}

export interface BootSecrets {
  values: Record<string, string>;
  sessionToken?: string | undefined;
}

export const noSecrets: SecretResolver = {
  resolve: () => Promise.resolve({}),
  boot: () => Promise.resolve({ values: {} }),
};

/**
 * Asks the scheduler for the session's secret envelopes
 * (`FleetRpc.sessionSecrets`): it answers only while the record places the
 * session on this runner at this generation, only names of the session's
 * environment, and — with per-principal NATS credentials — only to this
 * runner's own inbox, so a runner never reads another workspace's secrets.
 * The envelopes open here with PADDOCK_SECRETS_KEY. Every ref must be set; a
 * missing one fails the boot naming it, never quoting any value. Any other
 * failure is a BootError with the name only, so no error path carries a
 * value into a log or a fact.
 */
export class RpcSecretResolver implements SecretResolver {
  private readonly box: SecretBox;

  constructor(
    private readonly nc: NatsConnection,
    key: Buffer | undefined,
    private readonly runner: { poolId: string; runnerId: string },
    /**
     * How long a boot keeps asking while the control plane does not answer: a
     * broker failover or a scheduler restart must not fail a session that asks
     * for nothing but its token (well under the creating timeout, 120 s).
     */
    private readonly timeoutMs = 60_000,
    /** Waits between attempts while no scheduler answers (tests inject it). */
    private readonly sleep: (ms: number) => Promise<void> = (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
    /** One attempt's wait for an answer: a reply lost in a failover is asked again, not waited for until the budget ends. */
    private readonly attemptTimeoutMs = 5_000,
  ) {
    this.box = new SecretBox(key);
  }

  async resolve(refs: readonly string[], ctx: SecretContext): Promise<Record<string, string>> {
    if (refs.length === 0) return {};
    return (await this.ask(refs, ctx, false)).values;
  }

  /** One call for the values and the service token (asked for on every boot: DISPATCH never carries it). */
  boot(refs: readonly string[], ctx: SecretContext): Promise<BootSecrets> {
    return this.ask(refs, ctx, true);
  }

  private async ask(refs: readonly string[], ctx: SecretContext, token: boolean): Promise<BootSecrets> {
    const out: Record<string, string> = {};
    // Names come validated from the environment record; re-check so a key can never span workspaces.
    if (!refs.every((name) => SecretName.safeParse(name).success)) throw new BootError("secret reference is not a valid name");
    let reply: Awaited<ReturnType<typeof callRpc<typeof FleetRpc.sessionSecrets>>>;
    try {
      const { environmentId: _environmentId, ...placement } = ctx;
      reply = await this.call({ ...this.runner, ...placement, names: [...refs], ...(token ? { token } : {}) });
    } catch (err) {
      // The scheduler's reasons (no such placement, a name the environment does not reference) say nothing secret.
      if (err instanceof PaddockError && err.code !== "unavailable") throw new BootError(`secrets refused: ${err.message}`, { cause: err });
      throw new BootError("secret store unavailable", { cause: err });
    }
    const byName = new Map(reply.secrets.map((s) => [s.name, s.envelope]));
    for (const name of refs) {
      const envelope = byName.get(name);
      if (envelope === undefined) throw new BootError(`secret ${name} is not set`);
      try {
        out[name] = this.box.open(secretKey(ctx.workspaceId, name), Buffer.from(envelope, "base64"));
      } catch (err) {
        throw new BootError(`secret ${name} could not be read`, { cause: err });
      }
    }
    return { values: out, sessionToken: reply.sessionToken };
  }

  /**
   * Every boot asks (the token is never in DISPATCH), so a moment with no
   * scheduler answering (a replica restarting) is waited out, with backoff,
   * within the time budget; any answer, a refusal included, is final.
   */
  private async call(request: SessionSecretsRequest): Promise<SessionSecretsReply> {
    const deadline = Date.now() + this.timeoutMs;
    for (let backoffMs = 100; ; backoffMs = Math.min(backoffMs * 2, 2_000)) {
      try {
        return await callRpc(this.nc, FleetRpc.sessionSecrets, request, { timeoutMs: Math.max(1, Math.min(this.attemptTimeoutMs, deadline - Date.now())) });
      } catch (err) {
        if (!(err instanceof UnavailableError) || Date.now() + backoffMs >= deadline) throw err;
      }
      await this.sleep(backoffMs);
    }
  }
}
