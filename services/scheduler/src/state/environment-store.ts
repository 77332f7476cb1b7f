import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { Counter, type Registry } from "prom-client";
import { Buckets, Environment, environmentKey } from "@paddock/contracts";
import { encoderOf, isWrongLastSequence, type Encoder } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import { CasConflictError, Records, type Versioned } from "./store.ts";
import { KvView } from "./view.ts";

export interface EnvironmentMetrics {
  /** env_snapshot facts discarded because the environment's setupHash moved on (or it is gone). */
  staleSnapshots: Counter;
}

export function createEnvironmentMetrics(registry: Registry): EnvironmentMetrics {
  return {
    staleSnapshots: new Counter({
      name: "paddock_stale_env_snapshots_total",
      help: "Environment snapshots discarded because the environment's setup changed or it was deleted",
      registers: [registry],
    }),
  };
}

/**
 * A record whose last revision commits "delete" is on its way out (the KV
 * delete follows it): every reader treats it as gone.
 */
export function isDeleted(env: Environment): boolean {
  return env.lastFact.action === "delete";
}

/**
 * The environments bucket: exact reads and compare-and-set writes go to KV,
 * listings to the view. Every local write is applied to the view at once, so
 * a replica reads its own writes (including its deletes: the final "delete"
 * revision hides the record until the watch removes it).
 */
export class EnvironmentStore {
  readonly records: Records<typeof Environment>;

  constructor(
    private readonly kv: KV,
    readonly view: KvView<typeof Environment>,
    readonly metrics: EnvironmentMetrics,
    encode: Encoder,
  ) {
    this.records = new Records(kv, Environment, encode);
  }

  keyOf(e: { workspaceId: string; id: string }): string {
    return environmentKey(e.workspaceId, e.id);
  }

  /** The live record, or undefined when it does not exist (or is being deleted). */
  async find(workspaceId: string, environmentId: string): Promise<Versioned<Environment> | undefined> {
    const found = await this.records.get(environmentKey(workspaceId, environmentId));
    return found && !isDeleted(found.value) ? found : undefined;
  }

  async create(env: Environment): Promise<Versioned<Environment>> {
    const written = await this.records.create(this.keyOf(env), env);
    this.view.apply(this.keyOf(env), written);
    return written;
  }

  /** Compare-and-set; CasConflictError when someone wrote first. */
  async write(next: Environment, revision: number): Promise<Versioned<Environment>> {
    const written = await this.records.update(this.keyOf(next), next, revision);
    this.view.apply(this.keyOf(next), written);
    return written;
  }

  /** Deletes the key only if it is still at `revision`; CasConflictError otherwise. */
  async remove(env: Environment, revision: number): Promise<void> {
    const key = this.keyOf(env);
    try {
      await this.kv.delete(key, { previousSeq: revision });
    } catch (err) {
      if (isWrongLastSequence(err)) throw new CasConflictError(key, { cause: err });
      throw err;
    }
  }

  /** Live records of one workspace, from the view. */
  *listed(workspaceId: string): Generator<Environment> {
    for (const { value } of this.view.values()) {
      if (value.workspaceId === workspaceId && !isDeleted(value)) yield value;
    }
  }

  stop(): void {
    this.view.stop();
  }
}

/** Opens KV `environments` and starts its view; resolves once the view is ready. */
export async function createEnvironmentStore(
  nc: NatsConnection,
  deps: { log: Logger; registry: Registry },
): Promise<EnvironmentStore> {
  const kv = await new Kvm(nc).open(Buckets.environments);
  const view = new KvView(Environment);
  await view.start(nc, kv, Buckets.environments, deps.log);
  return new EnvironmentStore(kv, view, createEnvironmentMetrics(deps.registry), encoderOf(nc));
}
