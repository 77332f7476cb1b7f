/**
 * The runner agent's registration with the scheduler: claiming a generation
 * (register, then persist the grant), the resources it reports, and the
 * fence verdict on the runner record the scheduler keeps.
 */
import { statfs } from "node:fs/promises";
import type { NatsConnection } from "@nats-io/transport-node";
import type { KvEntry } from "@nats-io/kv";
import { Runner, RunnerState, type HeldSession, type RegisterRunnerReply, type RunnerResources } from "@paddock/contracts";
import { decodeJson } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import { readGeneration, writeGeneration } from "./generation-store.ts";
import { register } from "./registration.ts";

/**
 * The settings a registration reads (the runner's RunnerConfig is one; the
 * agent hands its config over as is, so a change there fails to compile here
 * rather than drifting). Declared here so that fleet/ never imports config.ts.
 */
export interface RegistrationSettings {
  runnerId: string;
  poolId: string;
  capacityTotal: number;
  capabilities: string[];
  /** Holds the persisted generation; its filesystem's free space is the disk reported when diskBytes is unset. */
  dataDir: string;
  cpuMillis: number;
  memoryBytes: number;
  diskBytes: number | undefined;
  registerTimeoutMs: number;
}

export interface RegisterRunnerOptions {
  nc: NatsConnection;
  log: Logger;
  config: RegistrationSettings;
  /** The sessions this runner holds, asked for once its resources are measured. */
  held: () => HeldSession[];
  isStopped: () => boolean;
  sleep: (ms: number) => Promise<void>;
}

/** Claims the persisted generation + 1 (authoritative + 1 after a refusal), persists the grant. */
export async function registerRunner(o: RegisterRunnerOptions): Promise<RegisterRunnerReply> {
  const { nc, log, config } = o;
  const persisted = await readGeneration(config.dataDir);
  const reply = await register({
    nc,
    log,
    runnerId: config.runnerId,
    poolId: config.poolId,
    capacityTotal: config.capacityTotal,
    capabilities: config.capabilities,
    resources: await resources(config, log),
    sessions: o.held(),
    persisted,
    timeoutMs: config.registerTimeoutMs,
    isStopped: o.isStopped,
    sleep: o.sleep,
  });
  await writeGeneration(config.dataDir, reply.generation);
  log.info({ generation: reply.generation, persisted }, "registered");
  return reply;
}

async function resources(config: RegisterRunnerOptions["config"], log: Logger): Promise<RunnerResources> {
  return {
    cpuMillis: config.cpuMillis,
    memoryBytes: config.memoryBytes,
    diskBytes: config.diskBytes ?? (await freeDisk(config.dataDir, log)),
  };
}

/** Why the stored record says this runner is superseded; undefined when it is not. */
export function fenceReason(entry: KvEntry | null, generation: number, log: Logger): string | undefined {
  if (!entry || entry.operation !== "PUT") return "missing";
  const record = decodeJson(Runner, entry.value);
  if (!record.ok) {
    log.warn({ reason: record.reason }, "runner record does not parse; not treated as fenced");
    return undefined;
  }
  if (record.value.state === RunnerState.lost) return "lost";
  if (record.value.generation !== generation) return "generation";
  return undefined;
}

/** Free bytes of the filesystem holding dir (0 when it cannot be measured). */
async function freeDisk(dir: string, log: Logger): Promise<number> {
  try {
    const s = await statfs(dir);
    return Math.max(0, Math.floor(Number(s.bavail) * Number(s.bsize)));
  } catch (err) {
    log.warn({ err, dir }, "free disk not measurable");
    return 0;
  }
}
