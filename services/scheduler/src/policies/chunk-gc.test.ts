import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import { sealed, sealKeyFrom } from "@paddock/archive";
import { chunkStreamConfig, encodeJson } from "@paddock/bus";
import { MANIFEST_FORMAT, ObjectStores, runnerChunkStream, runnerObjectStore, Subjects, type CheckpointManifest } from "@paddock/contracts";
import { createLogger } from "@paddock/logging";
import { useNatsServer } from "@paddock/testing/vitest";
import { SealKeys } from "../state/seal-keys.ts";
import { createChunkGc, ManifestUnreadableError } from "./chunk-gc.ts";

const nats = useNatsServer();
const GRACE_MS = 60_000;
const runner = { poolId: "default", id: "r1" };
const stream = runnerChunkStream(runner.poolId, runner.id);
const store = runnerObjectStore(ObjectStores.checkpoints, runner.poolId, runner.id);
const key = randomBytes(32).toString("base64");

/** A chunk id as the runner makes them (base64url of 32 bytes). */
const chunkId = () => randomBytes(32).toString("base64url");

async function setup() {
  const jsm = await jetstreamManager(nats.nc);
  await jsm.streams.add(chunkStreamConfig(runner.poolId, runner.id, 1)).catch(() => undefined);
  await jsm.streams.purge(stream);
  const os = await new Objm(nats.nc).create(store);
  const keys = new SealKeys(await new Kvm(nats.nc).create("seal-keys"), Date.now, encodeJson);
  const clock = { ms: 1_000_000 };
  const gc = createChunkGc({ nc: nats.nc, sealKeys: keys, now: () => clock.ms, graceMs: GRACE_MS, log: createLogger({ service: "test", level: "silent" }) });
  const putChunk = async (id: string) => void (await jetstream(nats.nc).publish(Subjects.chunk(runner.poolId, runner.id, id), randomBytes(64)));
  const putManifest = async (name: string, ids: string[], withKey = true) => {
    const manifest: CheckpointManifest = {
      version: 1,
      entries: [{ type: "file", path: `${name}.bin`, mode: 0o644, size: ids.length, mtimeMs: 0, chunks: ids.map((id) => ({ stream, id, key, sha256: chunkId(), bytes: 1 })) }],
    };
    const ref = `${store}/${name}`;
    const body = sealed(Readable.from([gzipSync(JSON.stringify(manifest))]), sealKeyFrom(key), ref);
    const parts: Buffer[] = [];
    for await (const p of body) parts.push(p as Buffer);
    await os.putBlob({ name, description: MANIFEST_FORMAT }, Buffer.concat(parts));
    if (withKey) await keys.put(ref, key);
    return ref;
  };
  const chunksLeft = async () => Object.keys((await jsm.streams.info(stream, { subjects_filter: ">" })).state.subjects ?? {}).map((s) => s.slice(s.lastIndexOf(".") + 1)).sort();
  return { gc, clock, putChunk, putManifest, chunksLeft, os, keys };
}

describe("checkpoint chunk collection", () => {
  it("keeps every chunk a kept manifest names; deletes one no manifest names only after a whole grace period unnamed", async () => {
    const t = await setup();
    const [a, b, c] = [chunkId(), chunkId(), chunkId()];
    for (const id of [a, b, c]) await t.putChunk(id);
    const m1 = await t.putManifest("m1", [a, b]);
    const m2 = await t.putManifest("m2", [b]);

    expect(await t.gc.run([m1, m2], [runner])).toEqual({ deletedChunks: 0 });
    t.clock.ms += GRACE_MS - 1;
    // c has been unnamed for less than the grace: kept.
    expect(await t.gc.run([m1, m2], [runner])).toEqual({ deletedChunks: 0 });
    t.clock.ms += 1;
    expect(await t.gc.run([m1, m2], [runner])).toEqual({ deletedChunks: 1 });
    expect(await t.chunksLeft()).toEqual([a, b].sort());

    // m1 superseded: a becomes unnamed now, and waits its own grace; b is still named by m2.
    expect(await t.gc.run([m2], [runner])).toEqual({ deletedChunks: 0 });
    t.clock.ms += GRACE_MS;
    expect(await t.gc.run([m2], [runner])).toEqual({ deletedChunks: 1 });
    expect(await t.chunksLeft()).toEqual([b]);
  });

  it("a chunk named again before its grace ran out is kept, and its clock starts over", async () => {
    const t = await setup();
    const a = chunkId();
    await t.putChunk(a);
    expect(await t.gc.run([], [runner])).toEqual({ deletedChunks: 0 });
    t.clock.ms += GRACE_MS / 2;
    const m = await t.putManifest("m3", [a]);
    expect(await t.gc.run([m], [runner])).toEqual({ deletedChunks: 0 });
    t.clock.ms += GRACE_MS / 2 + 1;
    expect(await t.gc.run([], [runner])).toEqual({ deletedChunks: 0 });
    expect(await t.chunksLeft()).toEqual([a]);
  });

  it("a manifest without a stored key names nothing; one with a key that does not open stops the pass", async () => {
    const t = await setup();
    const a = chunkId();
    await t.putChunk(a);
    const keyless = await t.putManifest("m4", [a], false);
    expect(await t.gc.run([keyless], [runner])).toEqual({ deletedChunks: 0 });
    t.clock.ms += GRACE_MS;
    // Opened with another key: what it names is unknown, nothing is deleted.
    const broken = await t.putManifest("m5", [a]);
    await t.keys.put(broken, randomBytes(32).toString("base64"));
    await expect(t.gc.run([broken], [runner])).rejects.toBeInstanceOf(ManifestUnreadableError);
    expect(await t.chunksLeft()).toEqual([a]);
    expect(await t.gc.run([keyless], [runner])).toEqual({ deletedChunks: 1 });
  });
});
