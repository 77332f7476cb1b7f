import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { SecretBox } from "@paddock/bus";
import { Buckets, SecretName, secretKey } from "@paddock/contracts";
import { BootError } from "./errors.ts";

/** Which session and environment asks, so a resolver can authorize the lookup. */
export interface SecretContext {
  workspaceId: string;
  sessionId: string;
  environmentId: string;
}

/**
 * Turns an environment's secretRefs into env-var values for init and the
 * apps. Values never reach a log, a fact or the terminal log. noSecrets
 * resolves nothing (unit tests); main.ts wires KvSecretResolver.
 */
export interface SecretResolver {
  resolve(refs: readonly string[], ctx: SecretContext): Promise<Record<string, string>>;
}

export const noSecrets: SecretResolver = {
  resolve: () => Promise.resolve({}),
};

/**
 * Reads secretRefs from KV `secrets` (`<workspace>.<name>`, a SecretBox
 * envelope) for the session's workspace, by key only: the runner's NATS user
 * may get secret records but not list or watch the bucket. Every ref must be
 * set; a missing one fails the boot naming it, never quoting any value. Any
 * other failure (NATS, a record that does not open) is a BootError with the
 * name only, so no error path carries a value into a log or a fact.
 */
export class KvSecretResolver implements SecretResolver {
  private readonly box: SecretBox;
  private readonly kv: () => Promise<KV>;

  constructor(nc: NatsConnection, key: Buffer | undefined) {
    this.box = new SecretBox(key);
    let opening: Promise<KV> | undefined;
    this.kv = () => {
      opening ??= new Kvm(nc).open(Buckets.secrets).catch((err: unknown) => {
        opening = undefined;
        throw err;
      });
      return opening;
    };
  }

  async resolve(refs: readonly string[], ctx: SecretContext): Promise<Record<string, string>> {
    const out: Record<string, string> = {};
    if (refs.length === 0) return out;
    let kv: KV;
    try {
      kv = await this.kv();
    } catch {
      throw new BootError("secret store unavailable");
    }
    for (const name of refs) {
      // Names come validated from the environment record; re-check so a key can never span workspaces.
      if (!SecretName.safeParse(name).success) throw new BootError("secret reference is not a valid name");
      const key = secretKey(ctx.workspaceId, name);
      let entry: Awaited<ReturnType<KV["get"]>>;
      try {
        entry = await kv.get(key);
      } catch {
        throw new BootError(`secret ${name} could not be read`);
      }
      if (!entry || entry.operation !== "PUT") throw new BootError(`secret ${name} is not set`);
      try {
        out[name] = this.box.open(key, entry.value);
      } catch {
        throw new BootError(`secret ${name} could not be read`);
      }
    }
    return out;
  }
}
