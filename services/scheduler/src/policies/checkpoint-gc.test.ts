import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import { Api, ObjectStores, runnerObjectStore, type Checkpoint } from "@paddock/contracts";
import { callRpc, encodeJson } from "@paddock/bus";
import type { EnvSnapshotFact } from "../api/environments.ts";
import { SealKeys } from "../state/seal-keys.ts";
import { untilSession } from "@paddock/testing";
import { alice, dispatchInbox, factFor, publishFact, register, runningSession, startHarness, testSealKey, type SchedulerHarness } from "../testing/testkit.ts";

const GRACE_MS = 60_000;
/** r1's own checkpoint store (as it provisions it at start). */
const R1_CHECKPOINTS = runnerObjectStore(ObjectStores.checkpoints, "default", "r1");

let h: SchedulerHarness;
beforeAll(async () => {
  h = await startHarness();
});
afterEach(async () => {
  await h.reset();
  const objm = new Objm(h.nc);
  for (const store of ["checkpoints", "env-snapshots", R1_CHECKPOINTS]) {
    const os = await objm.create(store);
    for (const info of await os.list()) await os.delete(info.name);
  }
});
afterAll(async () => h.close());

const sealed = (ref: string): Checkpoint => ({ ref, format: "tar+gzip+aes256gcm", capabilities: ["portable"] });

async function putObject(store: string, name: string): Promise<void> {
  const os = await new Objm(h.nc).create(store);
  await os.putBlob({ name }, new TextEncoder().encode(`sealed bytes of ${name}`));
}

async function objectNames(store: string): Promise<string[]> {
  const os = await new Objm(h.nc).open(store);
  return (await os.list()).map((i) => i.name).sort();
}

async function sealKeys(): Promise<SealKeys> {
  return new SealKeys(await new Kvm(h.nc).open("seal-keys"), h.clock.now, encodeJson);
}

describe("checkpoint object collection", () => {
  it("keeps the checkpoint a live record names and anything young; collects superseded objects, their keys and orphan keys", async () => {
    // The clock near the objects' mtimes (set by the writing client), so "young" means young.
    h.clock.ms = Date.now();
    const s = await h.start({ PADDOCK_CHECKPOINT_GC_INTERVAL_MS: "0", PADDOCK_CHECKPOINT_GC_GRACE_MS: String(GRACE_MS) });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 2 });
    const { session, start } = await runningSession(h.nc, "r1", inbox);

    const first = `ws1/${session.id}/1-chk_a`;
    const second = `ws1/${session.id}/1-chk_b`;
    for (const [name, requestId] of [[first, "chk_a"], [second, "chk_b"]] as const) {
      await putObject("checkpoints", name);
      await publishFact(h.nc, factFor("r1", start, { type: "checkpointed", requestId, checkpoint: sealed(`checkpoints/${name}`), sealKey: testSealKey }));
      await untilSession(h.nc, session.id, (x) => x.checkpoint?.ref === `checkpoints/${name}`);
    }
    // An object no record ever named (its runner died before reporting it).
    await putObject("checkpoints", "ws1/lost/1-chk_c");
    // A key whose object is already gone.
    const keys = await sealKeys();
    await keys.put("checkpoints/ws1/gone/1-x", testSealKey);

    // Everything is young: nothing goes.
    expect(await s.collectCheckpoints()).toEqual({ deletedObjects: [], deletedOrphanKeys: 0, deletedChunks: 0 });
    expect(await objectNames("checkpoints")).toEqual([first, second, "ws1/lost/1-chk_c"].sort());

    h.clock.advance(GRACE_MS + 60_000);
    const result = await s.collectCheckpoints();
    expect(result.deletedObjects.sort()).toEqual([`checkpoints/${first}`, "checkpoints/ws1/lost/1-chk_c"].sort());
    expect(result.deletedOrphanKeys).toBe(1);
    expect(await objectNames("checkpoints")).toEqual([second]);
    expect(await keys.get(`checkpoints/${second}`)).toBe(testSealKey);
    expect(await keys.get(`checkpoints/${first}`)).toBeUndefined();
    expect(await keys.get("checkpoints/ws1/gone/1-x")).toBeUndefined();
    expect((await untilSession(h.nc, session.id, () => true)).checkpoint?.ref).toBe(`checkpoints/${second}`);

    // A second pass finds nothing more to do.
    expect(await s.collectCheckpoints()).toEqual({ deletedObjects: [], deletedOrphanKeys: 0, deletedChunks: 0 });
  });

  it("collects every known runner's own store too, keeping what a live record names, and skips a runner that has no store", async () => {
    h.clock.ms = Date.now();
    const s = await h.start({ PADDOCK_CHECKPOINT_GC_INTERVAL_MS: "0", PADDOCK_CHECKPOINT_GC_GRACE_MS: String(GRACE_MS) });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 2 });
    // r2 never provisioned its stores: nothing is created for it.
    await register(h.nc, { runnerId: "r2", generation: 1, capacityTotal: 0 });
    const { session, start } = await runningSession(h.nc, "r1", inbox);
    const kept = `ws1/${session.id}/1-chk_a`;
    await putObject(R1_CHECKPOINTS, kept);
    await putObject(R1_CHECKPOINTS, "ws1/old/1-chk_b");
    await publishFact(h.nc, factFor("r1", start, { type: "checkpointed", requestId: "chk_a", checkpoint: sealed(`${R1_CHECKPOINTS}/${kept}`), sealKey: testSealKey }));
    await untilSession(h.nc, session.id, (x) => x.checkpoint !== undefined);

    h.clock.advance(GRACE_MS + 60_000);
    expect((await s.collectCheckpoints()).deletedObjects).toEqual([`${R1_CHECKPOINTS}/ws1/old/1-chk_b`]);
    expect(await objectNames(R1_CHECKPOINTS)).toEqual([kept]);
    const jsm = await jetstreamManager(h.nc);
    await expect(jsm.streams.info(`OBJ_${runnerObjectStore(ObjectStores.checkpoints, "default", "r2")}`)).rejects.toThrow(/not found/);
  });

  it("collects the checkpoint of a session that ended, but never an environment's current snapshot", async () => {
    h.clock.ms = Date.now();
    const s = await h.start({ PADDOCK_CHECKPOINT_GC_INTERVAL_MS: "0", PADDOCK_CHECKPOINT_GC_GRACE_MS: String(GRACE_MS) });
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1, capacityTotal: 2 });
    const { session, start } = await runningSession(h.nc, "r1", inbox);
    const name = `ws1/${session.id}/1-chk_a`;
    await putObject("checkpoints", name);
    await publishFact(h.nc, factFor("r1", start, { type: "checkpointed", requestId: "chk_a", checkpoint: sealed(`checkpoints/${name}`), sealKey: testSealKey }));
    await untilSession(h.nc, session.id, (x) => x.checkpoint !== undefined);
    await publishFact(h.nc, factFor("r1", start, { type: "failed", reason: "app crashed" }));
    await untilSession(h.nc, session.id, (x) => x.state === "failed");
    // An environment's current snapshot, and a snapshot object nobody references.
    const { environment: env } = await callRpc(h.nc, Api.createEnvironment, { scope: alice, body: { name: "e", image: "img", setup: "make" } });
    await putObject("env-snapshots", `ws1/${env.id}/${env.setupHash}`);
    await s.context.applyEnvSnapshot({
      ...factFor("r1", start, { type: "env_snapshot", environmentId: env.id, setupHash: env.setupHash, checkpoint: sealed(`env-snapshots/ws1/${env.id}/${env.setupHash}`), sealKey: testSealKey }),
    } as EnvSnapshotFact);
    await putObject("env-snapshots", "ws1/env_x/h1");

    h.clock.advance(GRACE_MS + 60_000);
    const result = await s.collectCheckpoints();
    expect(result.deletedObjects.sort()).toEqual([`checkpoints/${name}`, "env-snapshots/ws1/env_x/h1"]);
    expect(await objectNames("checkpoints")).toEqual([]);
    expect(await objectNames("env-snapshots")).toEqual([`ws1/${env.id}/${env.setupHash}`]);
    expect(await (await sealKeys()).get(`env-snapshots/ws1/${env.id}/${env.setupHash}`)).toBe(testSealKey);
  });
});
