// `node --import tsx scripts/restore.ts --nats URL --from DIR`: writes a backup
// of scripts/backup.ts into a fresh NATS (docs/operations.md, Backup and
// restore), before any Paddock service starts. In order: every file is checked
// against the manifest (a corrupt backup writes nothing); a server already
// holding Paddock state is refused unless --force (nothing written); the
// storage is provisioned as the services would; keys, objects and chunks are
// written; what the server then holds is compared with the backup.
import { createReadStream, readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Readable } from "node:stream";
import { chunkStreamConfig, isStreamNameInUse, isStreamNotFound, provision } from "@paddock/bus";
import { chunkStreamOwner, kvStreamName } from "@paddock/contracts";
import { parseScriptArgsOrExit } from "@paddock/testing";
import { checkChunkFile, readChunkRecords } from "./backup-chunks.ts";
import { BACKUP_FORMAT, BackupCorruptError, backedUpBuckets, credentialsOf, isBackedUpStore, ManifestChunkStream, parseRestoreArgs, RESTORE_USAGE, RestoreTargetNotEmptyError, RestoreVerifyError, sha256OfFile, type KvLine, type Manifest } from "./backup-format.ts";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";

/** The manifest, and every file it names checked for length and sha256; throws BackupCorruptError. */
async function verifiedManifest(dir: string): Promise<Manifest> {
  let manifest: Manifest;
  try {
    manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8")) as Manifest;
  } catch (err) {
    throw new BackupCorruptError(`${dir}/manifest.json is unreadable: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (manifest.format !== BACKUP_FORMAT) throw new BackupCorruptError(`${dir}/manifest.json: format ${JSON.stringify(manifest.format)}, expected ${BACKUP_FORMAT}`);
  const listed = new Set(manifest.files.map((f) => f.path));
  for (const f of manifest.files) {
    let digest: string;
    try {
      digest = await sha256OfFile(join(dir, f.path));
    } catch (err) {
      throw new BackupCorruptError(`${f.path}: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (digest !== f.sha256) throw new BackupCorruptError(`${f.path}: sha256 ${digest}, the manifest says ${f.sha256}`);
  }
  // Absent from backups older than chunk streams; where present, every entry must name a chunk stream.
  const parsedChunkStreams = ManifestChunkStream.array().optional().safeParse(manifest.chunkStreams);
  if (!parsedChunkStreams.success) throw new BackupCorruptError(`${dir}/manifest.json: chunkStreams: ${parsedChunkStreams.error.issues.map((i) => `${i.path.join(".")} ${i.message}`).join("; ")}`);
  const chunkStreams = parsedChunkStreams.data ?? [];
  // A bucket or object whose file the manifest does not vouch for is not restored on trust.
  for (const path of [...manifest.kv.map((b) => b.file), ...manifest.objectStores.flatMap((s) => s.objects.map((o) => o.file)), ...chunkStreams.map((c) => c.file)]) {
    if (!listed.has(path)) throw new BackupCorruptError(`${path} has no digest in the manifest`);
  }
  for (const b of manifest.kv) if (!backedUpBuckets().includes(b.bucket)) throw new BackupCorruptError(`bucket ${b.bucket} is not one Paddock backs up`);
  for (const s of manifest.objectStores) if (!isBackedUpStore(s.store)) throw new BackupCorruptError(`object store ${s.store} is not one Paddock backs up`);
  // Every record is read here, before anything is written: one publishing outside its stream's subjects is refused.
  for (const c of chunkStreams) await checkChunkFile(join(dir, c.file), c.stream, c.chunks);
  return { ...manifest, chunkStreams };
}

async function messagesIn(jsm: JetStreamManager, stream: string): Promise<number> {
  try {
    return (await jsm.streams.info(stream)).state.messages;
  } catch (err) {
    if (isStreamNotFound(err)) return 0;
    throw err;
  }
}

/** The buckets, stores and chunk streams of the backup that already hold something on the server. */
async function occupied(jsm: JetStreamManager, manifest: Manifest): Promise<string[]> {
  const streams = [...manifest.kv.map((b) => kvStreamName(b.bucket)), ...manifest.objectStores.map((s) => `OBJ_${s.store}`), ...(manifest.chunkStreams ?? []).map((c) => c.stream)];
  const found: string[] = [];
  for (const stream of streams) if ((await messagesIn(jsm, stream)) > 0) found.push(stream);
  return found;
}

async function* kvLines(path: string): AsyncGenerator<KvLine> {
  for await (const line of createInterface({ input: createReadStream(path), crlfDelay: Infinity })) {
    if (line !== "") yield JSON.parse(line) as KvLine;
  }
}

async function writeAll(nc: NatsConnection, dir: string, manifest: Manifest, replicas: number): Promise<void> {
  const kvm = new Kvm(nc);
  for (const b of manifest.kv) {
    const kv = await kvm.open(b.bucket);
    for await (const line of kvLines(join(dir, b.file))) await kv.put(line.key, Buffer.from(line.value, "base64"));
  }
  const objm = new Objm(nc);
  for (const s of manifest.objectStores) {
    // Per-runner stores are made by their runner's provisioning; made here as it would (same options).
    const os = await objm.create(s.store, { replicas });
    for (const o of s.objects) {
      const data = Readable.toWeb(createReadStream(join(dir, o.file))) as ReadableStream<Uint8Array>;
      await os.put({ name: o.name, ...(o.description !== undefined ? { description: o.description } : {}), ...(o.metadata !== undefined ? { metadata: o.metadata } : {}) }, data);
    }
  }
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  for (const c of manifest.chunkStreams ?? []) {
    const owner = chunkStreamOwner(c.stream);
    if (owner === undefined) throw new BackupCorruptError(`chunk stream ${c.stream} names no runner`); // checked by verifiedManifest
    // Made by its runner's provisioning; made here as it would (same config). With --force it may already exist
    // (the same config adds as a no-op; another one, e.g. other replicas, is left as its runner made it).
    await jsm.streams.add(chunkStreamConfig(owner.poolId, owner.runnerId, replicas)).catch((err: unknown) => {
      if (!isStreamNameInUse(err)) throw err;
    });
    for await (const r of readChunkRecords(join(dir, c.file))) {
      // A chunk is never replaced (its stream refuses a second message on a subject): with --force one already
      // there is kept, and verify below compares its bytes with the backup's.
      await js.publish(r.subject, r.data).catch((err: unknown) => {
        if (!/maximum messages per subject exceeded/i.test(String((err as Error).message))) throw err;
      });
    }
  }
}

/** Reads back what was written: every key's value, every object's size and digest and every chunk's bytes equal the backup's. */
async function verify(nc: NatsConnection, dir: string, manifest: Manifest): Promise<{ keys: number; objects: number; chunks: number }> {
  let keys = 0;
  let objects = 0;
  let chunks = 0;
  const kvm = new Kvm(nc);
  for (const b of manifest.kv) {
    const kv = await kvm.open(b.bucket);
    let n = 0;
    for await (const line of kvLines(join(dir, b.file))) {
      const entry = await kv.get(line.key);
      if (entry?.operation !== "PUT" || Buffer.from(entry.value).toString("base64") !== line.value) throw new RestoreVerifyError(`${b.bucket}: key ${line.key} does not hold the backed-up value`);
      n += 1;
    }
    if (n !== b.entries) throw new RestoreVerifyError(`${b.bucket}: ${String(n)} keys in the file, the manifest says ${String(b.entries)}`);
    keys += n;
  }
  const objm = new Objm(nc);
  for (const s of manifest.objectStores) {
    const os = await objm.open(s.store);
    for (const o of s.objects) {
      const info = await os.info(o.name);
      if (info === null || info.size !== o.size || info.digest !== o.digest) throw new RestoreVerifyError(`${s.store}: object ${o.name} is not the backed-up one`);
      objects += 1;
    }
  }
  const jsm = await jetstreamManager(nc);
  for (const c of manifest.chunkStreams ?? []) {
    for await (const r of readChunkRecords(join(dir, c.file))) {
      const m = await jsm.direct.getMessage(c.stream, { last_by_subj: r.subject });
      if (m === null || m.data.length !== r.data.length || !Buffer.from(m.data).equals(r.data)) throw new RestoreVerifyError(`${c.stream}: chunk ${r.subject} is not the backed-up one`);
      chunks += 1;
    }
  }
  return { keys, objects, chunks };
}

async function main(): Promise<void> {
  const args = parseScriptArgsOrExit(RESTORE_USAGE, parseRestoreArgs);
  const manifest = await verifiedManifest(args.from);
  const creds = credentialsOf(args);
  const nc = await connect({ servers: args.nats.split(",").map((s) => s.trim()), name: "paddock-restore", ...(creds ?? {}) });
  try {
    const jsm = await jetstreamManager(nc);
    const found = await occupied(jsm, manifest);
    if (found.length > 0 && !args.force) throw new RestoreTargetNotEmptyError(`the server already holds Paddock state (${found.join(", ")}); restore into a fresh server, or pass --force to overwrite`);
    await provision(nc, { replicas: args.replicas });
    await writeAll(nc, args.from, manifest, args.replicas);
    const counts = await verify(nc, args.from, manifest);
    process.stdout.write(`${JSON.stringify({ buckets: manifest.kv.length, keys: counts.keys, stores: manifest.objectStores.length, objects: counts.objects, chunkStreams: manifest.chunkStreams?.length ?? 0, chunks: counts.chunks, verified: true })}\n`);
  } finally {
    await nc.close();
  }
}

main().catch((err: unknown) => {
  const code = (err as { code?: unknown }).code;
  process.stderr.write(`restore: ${typeof code === "string" ? `${code}: ` : ""}${err instanceof Error ? err.message : String(err)}\n`);
  // 3: refused before anything was written (a corrupt backup, a server not empty); 1: failed on the way.
  process.exit(err instanceof BackupCorruptError || err instanceof RestoreTargetNotEmptyError ? 3 : 1);
});
