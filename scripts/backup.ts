// `node --import tsx scripts/backup.ts --nats URL --out DIR`: a logical copy of
// Paddock's state (docs/operations.md, Backup and restore): the latest value of
// every key of every backed-up KV bucket (JSON lines, values base64) and every
// object of the checkpoint and environment-snapshot stores (one file each, its
// metadata in the manifest), every chunk of the runners' chunk streams (one
// file of records per stream), with a manifest of counts and sha256 digests.
// Each bucket and store is read in turn, not at one instant: see the doc for
// what a backup taken under load may miss.
import { createHash } from "node:crypto";
import { createWriteStream, existsSync, mkdirSync, readdirSync, statSync, writeFileSync, type WriteStream } from "node:fs";
import { join } from "node:path";
import { once } from "node:events";
import { isStreamNotFound } from "@paddock/bus";
import { kvStreamName } from "@paddock/contracts";
import { parseScriptArgsOrExit } from "@paddock/testing";
import { encodeChunkRecord } from "./backup-chunks.ts";
import { BACKUP_FORMAT, BACKUP_USAGE, backedUpBuckets, credentialsOf, isBackedUpStore, isChunkStream, parseBackupArgs, type KvLine, type Manifest, type ManifestFile, type ManifestObject } from "./backup-format.ts";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";

/** A file written in pieces while its sha256 and length are counted (no backup file is held in memory whole). */
class HashedFile {
  private readonly hash = createHash("sha256");
  private readonly out: WriteStream;
  private bytes = 0;
  constructor(private readonly dir: string, private readonly path: string) {
    this.out = createWriteStream(join(dir, path), { mode: 0o600 });
  }
  async write(chunk: Uint8Array | string): Promise<void> {
    const buf = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    this.hash.update(buf);
    this.bytes += buf.length;
    if (!this.out.write(buf)) await once(this.out, "drain");
  }
  async close(): Promise<ManifestFile> {
    this.out.end();
    await once(this.out, "finish");
    return { path: this.path, bytes: this.bytes, sha256: this.hash.digest("hex") };
  }
}

async function streamExists(jsm: JetStreamManager, name: string): Promise<boolean> {
  try {
    await jsm.streams.info(name);
    return true;
  } catch (err) {
    if (isStreamNotFound(err)) return false;
    throw err;
  }
}

async function backupBuckets(nc: NatsConnection, jsm: JetStreamManager, dir: string, manifest: Manifest): Promise<void> {
  mkdirSync(join(dir, "kv"), { mode: 0o700 });
  for (const bucket of backedUpBuckets()) {
    // A deployment older than the bucket simply has none yet.
    if (!(await streamExists(jsm, kvStreamName(bucket)))) continue;
    const kv = await new Kvm(nc).open(bucket);
    const keys: string[] = [];
    for await (const key of await kv.keys()) keys.push(key);
    keys.sort();
    const file = new HashedFile(dir, join("kv", `${bucket}.jsonl`));
    let entries = 0;
    for (const key of keys) {
      // Deleted or expired between the listing and the read: not state any more.
      const entry = await kv.get(key);
      if (entry === null || entry.operation !== "PUT") continue;
      const line: KvLine = { key, value: Buffer.from(entry.value).toString("base64") };
      await file.write(`${JSON.stringify(line)}\n`);
      entries += 1;
    }
    const written = await file.close();
    manifest.files.push(written);
    manifest.kv.push({ bucket, file: written.path, entries });
  }
}

async function backupObjectStores(nc: NatsConnection, jsm: JetStreamManager, dir: string, manifest: Manifest): Promise<void> {
  mkdirSync(join(dir, "obj"), { mode: 0o700 });
  const stores: string[] = [];
  for await (const name of jsm.streams.names()) {
    if (name.startsWith("OBJ_") && isBackedUpStore(name.slice(4))) stores.push(name.slice(4));
  }
  stores.sort();
  const objm = new Objm(nc);
  for (const store of stores) {
    const os = await objm.open(store);
    mkdirSync(join(dir, "obj", store), { mode: 0o700 });
    const objects: ManifestObject[] = [];
    const infos = (await os.list()).filter((i) => !i.deleted).sort((a, b) => a.name.localeCompare(b.name));
    for (const [n, info] of infos.entries()) {
      const result = await os.get(info.name);
      if (result === null) continue; // deleted since the listing
      const file = new HashedFile(dir, join("obj", store, `${String(n)}.bin`));
      const reader = result.data.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        await file.write(value);
      }
      const failed = await result.error;
      if (failed) throw failed;
      const written = await file.close();
      manifest.files.push(written);
      objects.push({
        name: info.name,
        file: written.path,
        size: written.bytes,
        digest: result.info.digest,
        ...(info.description !== undefined && info.description !== "" ? { description: info.description } : {}),
        ...(info.metadata !== undefined && Object.keys(info.metadata).length > 0 ? { metadata: info.metadata } : {}),
      });
    }
    manifest.objectStores.push({ store, objects });
  }
}

/** Each runner's chunk stream as one file of records (scripts/backup-chunks.ts), sorted by subject. */
async function backupChunkStreams(jsm: JetStreamManager, dir: string, manifest: Manifest): Promise<void> {
  mkdirSync(join(dir, "chunks"), { mode: 0o700 });
  const streams: string[] = [];
  for await (const name of jsm.streams.names()) if (isChunkStream(name)) streams.push(name);
  streams.sort();
  manifest.chunkStreams = [];
  for (const stream of streams) {
    // One message per subject (max_msgs_per_subject 1): the subjects are the chunks.
    const subjects = Object.keys((await jsm.streams.info(stream, { subjects_filter: ">" })).state.subjects ?? {}).sort();
    const file = new HashedFile(dir, join("chunks", `${stream}.bin`));
    let chunks = 0;
    for (const subject of subjects) {
      // Collected (unreferenced) since the listing: nothing names it any more.
      const m = await jsm.direct.getMessage(stream, { last_by_subj: subject });
      if (m === null) continue;
      for (const part of encodeChunkRecord(subject, m.data)) await file.write(part);
      chunks += 1;
    }
    const written = await file.close();
    manifest.files.push(written);
    manifest.chunkStreams.push({ stream, file: written.path, chunks });
  }
}

async function main(): Promise<void> {
  const args = parseScriptArgsOrExit(BACKUP_USAGE, parseBackupArgs);
  // Never mixed into an older backup: its manifest would not describe the files.
  if (existsSync(args.out) && (!statSync(args.out).isDirectory() || readdirSync(args.out).length > 0)) {
    process.stderr.write(`backup: --out ${args.out} exists and is not an empty directory\n`);
    process.exit(2);
  }
  mkdirSync(args.out, { recursive: true, mode: 0o700 });
  const creds = credentialsOf(args);
  const nc = await connect({ servers: args.nats.split(",").map((s) => s.trim()), name: "paddock-backup", ...(creds ?? {}) });
  try {
    const jsm = await jetstreamManager(nc);
    const manifest: Manifest = { format: BACKUP_FORMAT, createdAt: new Date().toISOString(), kv: [], objectStores: [], files: [] };
    await backupBuckets(nc, jsm, args.out, manifest);
    await backupObjectStores(nc, jsm, args.out, manifest);
    // After the stores, so every chunk a backed-up manifest names is still there: the collector deletes a chunk only
    // after a grace period in which no manifest named it (a chunk stored in between is copied too, named by nothing).
    await backupChunkStreams(jsm, args.out, manifest);
    writeFileSync(join(args.out, "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`, { mode: 0o600 });
    const objects = manifest.objectStores.reduce((sum, s) => sum + s.objects.length, 0);
    const keys = manifest.kv.reduce((sum, b) => sum + b.entries, 0);
    const chunks = (manifest.chunkStreams ?? []).reduce((sum, c) => sum + c.chunks, 0);
    process.stdout.write(`${JSON.stringify({ buckets: manifest.kv.length, keys, stores: manifest.objectStores.length, objects, chunkStreams: manifest.chunkStreams?.length ?? 0, chunks })}\n`);
  } finally {
    await nc.close();
  }
}

main().catch((err: unknown) => {
  const code = (err as { code?: unknown }).code;
  process.stderr.write(`backup: ${typeof code === "string" ? `${code}: ` : ""}${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
