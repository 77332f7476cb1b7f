import { appendFileSync, chmodSync, linkSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, statSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { gunzipSync, gzipSync } from "node:zlib";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, describe, expect, it } from "vitest";
import { Objm } from "@nats-io/obj";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { newSealKey, sealed, sealKeyFrom, unsealed } from "@paddock/archive";
import { CheckpointManifest, MANIFEST_CHUNK_BYTES, MANIFEST_FORMAT, ObjectStores, runnerChunkStream, runnerObjectStore } from "@paddock/contracts";
import { useNatsServer } from "@paddock/testing/vitest";
import { CheckpointError } from "../errors.ts";
import { createCheckpointStore } from "./checkpoint.ts";
import type { ChunkAddress } from "./chunk-fetch.ts";
import { ChunkFiller } from "./chunk-fill.ts";
import { createChunkStore } from "./chunk-store.ts";
import { FillWorker } from "./fill-worker-host.ts";
import type { ManifestStats } from "./incremental.ts";

const nats = useNatsServer();
const runnerA = { poolId: "p1", runnerId: "ra" };
const runnerB = { poolId: "p1", runnerId: "rb" };
const workers: FillWorker[] = [];
afterAll(() => Promise.all(workers.map((w) => w.stop())));

function freshDir(prefix: string): string {
  const dir = join(mkdtempSync(join(tmpdir(), prefix)), "workspace");
  mkdirSync(dir);
  return dir;
}

async function storesFor(owner: { poolId: string; runnerId: string }) {
  await new Objm(nats.nc).create(runnerObjectStore(ObjectStores.checkpoints, owner.poolId, owner.runnerId));
  const seen: ManifestStats[] = [];
  // Restores fetch and write their chunks on a worker thread with a connection of its own, as a runner's do.
  const filler = new FillWorker({ bus: { servers: nats.url, name: `test-${owner.runnerId}-restore`, validateOutgoing: true } });
  workers.push(filler);
  // Every restore through them, however small (a runner sends only large ones: RESTORE_WORKERS_MIN_CHUNKS).
  const store = createCheckpointStore(nats.nc, owner, { onManifest: (s) => seen.push(s), filler, fillerMinChunks: 0 });
  return { store, last: () => seen.at(-1) };
}

/** Past the margin within which a file's ctime cannot yet be trusted (incremental.ts). */
const settle = () => sleep(30);

async function opened(bytes: Buffer, key: string, ref: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const p of unsealed(Readable.from([bytes]), sealKeyFrom(key), ref)) parts.push(p as Buffer);
  return Buffer.concat(parts);
}

async function closed(bytes: Buffer, key: Buffer, ref: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const p of sealed(Readable.from([bytes]), key, ref)) parts.push(p as Buffer);
  return Buffer.concat(parts);
}

async function chunkCount(owner: { poolId: string; runnerId: string }): Promise<number> {
  const info = await (await jetstreamManager(nats.nc)).streams.info(runnerChunkStream(owner.poolId, owner.runnerId));
  return info.state.messages;
}

describe("incremental checkpoints", () => {
  it("round-trips files, modes, directories, symlinks and hard links onto another runner", async () => {
    const a = await storesFor(runnerA);
    const b = await storesFor(runnerB);
    const ws = freshDir("paddock-inc-");
    const big = randomBytes(2 * MANIFEST_CHUNK_BYTES + 123);
    mkdirSync(join(ws, "src/deep"), { recursive: true });
    writeFileSync(join(ws, "src/deep/big.bin"), big);
    writeFileSync(join(ws, "run.sh"), "#!/bin/sh\necho hi\n");
    chmodSync(join(ws, "run.sh"), 0o755);
    writeFileSync(join(ws, "empty"), "");
    symlinkSync("src/deep/big.bin", join(ws, "link"));
    linkSync(join(ws, "run.sh"), join(ws, "hard.sh"));
    const saved = await a.store.save(ObjectStores.checkpoints, "w/s/1-a", ws);
    expect(saved.checkpoint.format).toBe(MANIFEST_FORMAT);
    expect(a.last()).toMatchObject({ files: 3, filesRead: 3, chunksStored: 4 });

    const target = freshDir("paddock-inc-restore-");
    await b.store.restore(saved.checkpoint, saved.sealKey, target);
    expect(readFileSync(join(target, "src/deep/big.bin")).equals(big)).toBe(true);
    expect(readFileSync(join(target, "run.sh"), "utf8")).toBe("#!/bin/sh\necho hi\n");
    expect(statSync(join(target, "run.sh")).mode & 0o777).toBe(0o755);
    expect(statSync(join(target, "empty")).size).toBe(0);
    expect(readlinkSync(join(target, "link"))).toBe("src/deep/big.bin");
    expect(statSync(join(target, "hard.sh")).ino).toBe(statSync(join(target, "run.sh")).ino);
  });

  it("stores only what changed since its base, and nothing when nothing changed", async () => {
    const a = await storesFor({ poolId: "p1", runnerId: "rc" });
    const ws = freshDir("paddock-inc-");
    for (let i = 0; i < 8; i++) writeFileSync(join(ws, `f${i}.bin`), randomBytes(MANIFEST_CHUNK_BYTES));
    await settle();
    const first = await a.store.save(ObjectStores.checkpoints, "w/s/1-a", ws);
    expect(a.last()).toMatchObject({ files: 8, filesRead: 8, chunksStored: 8 });

    // Without a base every file is read and stored again: chunks are reused only along the lineage a command names.
    await a.store.save(ObjectStores.checkpoints, "w/s/1-b", ws, undefined, []);
    expect(a.last()).toMatchObject({ filesRead: 8, chunksStored: 8 });

    const same = await a.store.save(ObjectStores.checkpoints, "w/s/1-c", ws, undefined, [first.checkpoint.ref]);
    expect(a.last()).toMatchObject({ files: 8, filesRead: 0, chunksStored: 0 });

    writeFileSync(join(ws, "f3.bin"), randomBytes(MANIFEST_CHUNK_BYTES));
    appendFileSync(join(ws, "f5.bin"), "tail");
    writeFileSync(join(ws, "new.txt"), "new");
    await settle();
    const next = await a.store.save(ObjectStores.checkpoints, "w/s/1-d", ws, undefined, [same.checkpoint.ref]);
    // f3 whole, f5's short tail (its first chunk unchanged), new.txt.
    expect(a.last()).toMatchObject({ files: 9, filesRead: 3, chunksStored: 3, bytesStored: MANIFEST_CHUNK_BYTES + 4 + 3 });

    const target = freshDir("paddock-inc-restore-");
    await a.store.restore(next.checkpoint, next.sealKey, target);
    for (const name of ["f0.bin", "f3.bin", "f5.bin", "new.txt"]) expect(readFileSync(join(target, name)).equals(readFileSync(join(ws, name))), name).toBe(true);
  });

  it("a file touched but not changed is read again and stores nothing, however many chunks it has", async () => {
    const a = await storesFor({ poolId: "p1", runnerId: "rh" });
    const ws = freshDir("paddock-inc-");
    // More chunks than are stored at once: a known chunk must not hold a slot.
    writeFileSync(join(ws, "big.bin"), randomBytes(40 * MANIFEST_CHUNK_BYTES));
    await settle();
    const first = await a.store.save(ObjectStores.checkpoints, "w/s/1-a", ws);
    utimesSync(join(ws, "big.bin"), new Date(), new Date());
    await settle();
    await a.store.save(ObjectStores.checkpoints, "w/s/1-b", ws, undefined, [first.checkpoint.ref]);
    expect(a.last()).toMatchObject({ files: 1, filesRead: 1, chunksStored: 0 });
  });

  it("builds on a restored checkpoint: the next one after a resume reads only what the session changed", async () => {
    const a = await storesFor({ poolId: "p1", runnerId: "rd" });
    const b = await storesFor({ poolId: "p1", runnerId: "re" });
    const ws = freshDir("paddock-inc-");
    for (let i = 0; i < 4; i++) writeFileSync(join(ws, `f${i}.bin`), randomBytes(1000 + i));
    await settle();
    const first = await a.store.save(ObjectStores.checkpoints, "w/s/1-a", ws);
    const moved = freshDir("paddock-inc-moved-");
    await b.store.restore(first.checkpoint, first.sealKey, moved);
    writeFileSync(join(moved, "f1.bin"), "changed on b");
    await settle();
    const second = await b.store.save(ObjectStores.checkpoints, "w/s/2-a", moved, undefined, [first.checkpoint.ref]);
    expect(b.last()).toMatchObject({ files: 4, filesRead: 1, chunksStored: 1 });
    // The unchanged chunks stay in runner A's stream; runner B stored one.
    expect(await chunkCount({ poolId: "p1", runnerId: "re" })).toBe(1);
    const back = freshDir("paddock-inc-back-");
    await a.store.restore(second.checkpoint, second.sealKey, back);
    expect(readFileSync(join(back, "f1.bin"), "utf8")).toBe("changed on b");
    expect(readFileSync(join(back, "f2.bin")).equals(readFileSync(join(ws, "f2.bin")))).toBe(true);
  });

  it("reads a file again whose ctime was too recent to trust when indexed, even when its stat looks the same", async () => {
    await new Objm(nats.nc).create(runnerObjectStore(ObjectStores.checkpoints, "p1", "rf"));
    const ws = freshDir("paddock-inc-");
    writeFileSync(join(ws, "hot.txt"), "aaaa");
    const ctimeMs = lstatSync(join(ws, "hot.txt")).ctimeMs;
    const seen: ManifestStats[] = [];
    let clock = ctimeMs + 5;
    const store = createCheckpointStore(nats.nc, { poolId: "p1", runnerId: "rf" }, { now: () => clock, onManifest: (s) => seen.push(s) });
    // Taken 5 ms after the file's last change: a write in the same clock tick would not have moved its ctime.
    const first = await store.save(ObjectStores.checkpoints, "w/s/1-a", ws);
    clock = ctimeMs + 1000;
    const second = await store.save(ObjectStores.checkpoints, "w/s/1-b", ws, undefined, [first.checkpoint.ref]);
    expect(seen[1]).toMatchObject({ filesRead: 1, chunksStored: 0 });
    // Indexed a second after its change: trusted from now on.
    await store.save(ObjectStores.checkpoints, "w/s/1-c", ws, undefined, [second.checkpoint.ref]);
    expect(seen[2]).toMatchObject({ filesRead: 0, chunksStored: 0 });
  });

  it("a hostile manifest (a link, then a file through it) is refused by the extractor, nothing written outside the workspace", async () => {
    const a = await storesFor({ poolId: "p1", runnerId: "ri" });
    const outside = freshDir("paddock-inc-outside-");
    const ws = freshDir("paddock-inc-");
    writeFileSync(join(ws, "x.bin"), "payload");
    const saved = await a.store.save(ObjectStores.checkpoints, "w/s/1-a", ws);
    // The same chunks under a manifest a tampering runner could write: "esc" links out, "esc/x.bin" writes through it.
    const os = await new Objm(nats.nc).open(runnerObjectStore(ObjectStores.checkpoints, "p1", "ri"));
    const sealedBytes = Buffer.from((await os.getBlob("w/s/1-a")) ?? []);
    const manifest = CheckpointManifest.parse(JSON.parse(gunzipSync(await opened(sealedBytes, saved.sealKey, saved.checkpoint.ref)).toString("utf8")));
    const file = manifest.entries.find((e) => e.type === "file");
    if (file?.type !== "file") throw new Error("expected a file entry");
    const hostile = { version: 1, entries: [{ type: "symlink", path: "esc", target: `../../${outside.split("/").slice(-2).join("/")}`, mtimeMs: 0 }, { ...file, path: "esc/x.bin" }] };
    const ref = `${runnerObjectStore(ObjectStores.checkpoints, "p1", "ri")}/w/s/1-evil`;
    const key = newSealKey();
    await os.putBlob({ name: "w/s/1-evil" }, await closed(gzipSync(JSON.stringify(hostile)), key, ref));
    const target = freshDir("paddock-inc-r-");
    const refused = await a.store.restore({ ...saved.checkpoint, ref }, key.toString("base64"), target).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(CheckpointError);
    expect(readdirSync(outside)).toEqual([]);
  });

  it("a base naming checkpoints this runner knows nothing of stores everything, as with none", async () => {
    const a = await storesFor({ poolId: "p1", runnerId: "rj" });
    const ws = freshDir("paddock-inc-");
    writeFileSync(join(ws, "x.bin"), randomBytes(3000));
    await settle();
    await a.store.save(ObjectStores.checkpoints, "w/s/1-a", ws, undefined, ["nowhere/at/all", ""]);
    expect(a.last()).toMatchObject({ filesRead: 1, chunksStored: 1 });
  });

  it("a stored chunk is never replaced, not even by its own runner", async () => {
    const a = await storesFor({ poolId: "p1", runnerId: "rk" });
    const ws = freshDir("paddock-inc-");
    writeFileSync(join(ws, "x.bin"), "kept");
    const saved = await a.store.save(ObjectStores.checkpoints, "w/s/1-a", ws);
    const jsm = await jetstreamManager(nats.nc);
    const [subject = ""] = Object.keys((await jsm.streams.info(runnerChunkStream("p1", "rk"), { subjects_filter: ">" })).state.subjects ?? {});
    await expect(jetstream(nats.nc).publish(subject, new TextEncoder().encode("replaced"))).rejects.toThrow(/maximum messages per subject/i);
    const target = freshDir("paddock-inc-r-");
    await a.store.restore(saved.checkpoint, saved.sealKey, target);
    expect(readFileSync(join(target, "x.bin"), "utf8")).toBe("kept");
  });

  it("refuses a manifest opened with another key, and a chunk that is gone, with a CheckpointError", async () => {
    const a = await storesFor({ poolId: "p1", runnerId: "rg" });
    const ws = freshDir("paddock-inc-");
    writeFileSync(join(ws, "x.bin"), randomBytes(5000));
    const saved = await a.store.save(ObjectStores.checkpoints, "w/s/1-a", ws);
    const wrongKey = await a.store.restore(saved.checkpoint, newSealKey().toString("base64"), freshDir("paddock-inc-r-")).catch((e: unknown) => e);
    expect(wrongKey).toBeInstanceOf(CheckpointError);
    const jsm = await jetstreamManager(nats.nc);
    await jsm.streams.purge(runnerChunkStream("p1", "rg"));
    const gone = await a.store.restore(saved.checkpoint, saved.sealKey, freshDir("paddock-inc-r-")).catch((e: unknown) => e);
    expect(gone).toMatchObject({ name: "CheckpointError", message: "checkpoint chunk not found" });
  });

  it("sends a restore to the filler given only from its chunk count on; a smaller one is written on the caller's thread", async () => {
    const owner = { poolId: "p1", runnerId: "rt" };
    await new Objm(nats.nc).create(runnerObjectStore(ObjectStores.checkpoints, owner.poolId, owner.runnerId));
    const inner = new ChunkFiller((chunks) => createChunkStore(nats.nc, owner).fetch(chunks));
    const filled: number[] = [];
    const counting = { fill: (fd: number, chunks: readonly ChunkAddress[]) => (filled.push(chunks.length), inner.fill(fd, chunks)) };
    const store = createCheckpointStore(nats.nc, owner, { filler: counting, fillerMinChunks: 3 });
    // Two chunks, then three (a file of 100 bytes is one).
    for (const [name, files, viaFiller] of [["small", 2, 0], ["large", 3, 1]] as const) {
      const ws = freshDir("paddock-inc-threshold-");
      const contents = Array.from({ length: files }, () => randomBytes(100));
      contents.forEach((c, i) => writeFileSync(join(ws, `f${i}.bin`), c));
      const saved = await store.save(ObjectStores.checkpoints, `w/s/threshold-${name}`, ws);
      filled.length = 0;
      const target = freshDir("paddock-inc-threshold-restore-");
      await store.restore(saved.checkpoint, saved.sealKey, target);
      contents.forEach((c, i) => expect(readFileSync(join(target, `f${i}.bin`)).equals(c)).toBe(true));
      expect(filled.length, name).toBe(viaFiller * files);
    }
  });
});
