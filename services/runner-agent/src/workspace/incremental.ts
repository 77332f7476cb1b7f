import { fstatSync, read, readSync } from "node:fs";
import { Readable } from "node:stream";
import { promisify } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { DirFd, extractArchive, scanTree, treeTar, type FileOwner } from "@paddock/archive";
import { MANIFEST_CHUNK_BYTES, type CheckpointManifest, type ManifestChunk, type ManifestEntry } from "@paddock/contracts";
import { CheckpointError } from "../errors.ts";
import type { FileFiller } from "./chunk-fill.ts";
import { addressOf, sha256Url, type ChunkStore } from "./chunk-store.ts";
import type { ChunkAddress } from "./chunk-fetch.ts";

/**
 * Incremental checkpoints (docs/decisions/0062): a manifest of the
 * workspace whose files are lists of chunks. A file unchanged since the
 * checkpoint the command names as its base (same inode, size, mtime and ctime
 * as then) keeps its chunks without being read; a changed one is read and
 * only its chunks whose bytes the base does not hold are stored.
 */

const readAsync = promisify(read);

/**
 * File times come from the kernel's coarse clock, which moves once a tick
 * (≤ 10 ms at HZ ≥ 100). A write after a stat at time s gets a ctime later
 * than s minus a tick, so only a file whose ctime is older than s minus this
 * margin can be recognised by its stat next time; a younger one is read again.
 */
const RACY_MARGIN_MS = 20;

/** Chunks being stored at once: the memory a checkpoint holds (× MANIFEST_CHUNK_BYTES) and the acknowledgements in flight. */
const PUTS_IN_FLIGHT = 16;

/** What a checkpoint stored or restored in a workspace knows of it: enough to tell the next one what changed. */
export interface LineageIndex {
  /** Path → the stat its chunks stand for (files whose stat could not be trusted are absent). */
  files: Map<string, IndexedFile>;
  /** Plain sha256 → a chunk holding those bytes. */
  byHash: Map<string, ManifestChunk>;
}

interface IndexedFile {
  ino: number;
  size: number;
  mtimeMs: number;
  ctimeMs: number;
  chunks: ManifestChunk[];
}

/** Counts what a checkpoint read and stored (figures for the bench and the log). */
export interface ManifestStats {
  files: number;
  filesRead: number;
  chunksStored: number;
  bytesStored: number;
}

/** A semaphore: at most `size` holders at once. */
class Slots {
  private free: number;
  private readonly waiting: Array<() => void> = [];
  constructor(size: number) {
    this.free = size;
  }
  async acquire(): Promise<void> {
    if (this.free > 0) {
      this.free -= 1;
      return;
    }
    await new Promise<void>((resolve) => this.waiting.push(resolve));
  }
  release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.free += 1;
  }
}

type PendingEntry = Exclude<ManifestEntry, { type: "file" }> | (Omit<Extract<ManifestEntry, { type: "file" }>, "chunks"> & { chunks: Array<Promise<ManifestChunk>> });

/** Walks root and stores what base does not hold; answers the manifest and the index the next checkpoint builds on. */
export async function buildManifest(
  root: DirFd,
  owner: FileOwner | undefined,
  store: ChunkStore,
  base: LineageIndex | undefined,
  /** The wall clock file times are compared with (the kernel's, in ms). */
  now: () => number = Date.now,
): Promise<{ manifest: CheckpointManifest; index: LineageIndex; stats: ManifestStats }> {
  const entries: PendingEntry[] = [];
  const trusted = new Map<string, Omit<IndexedFile, "chunks">>();
  const storing = new Map<string, Promise<ManifestChunk>>();
  const slots = new Slots(PUTS_IN_FLIGHT);
  const stats: ManifestStats = { files: 0, filesRead: 0, chunksStored: 0, bytesStored: 0 };
  let failure: unknown;
  const chunkOf = (plain: Buffer, sha256: string): Promise<ManifestChunk> => {
    const known = base?.byHash.get(sha256);
    if (known) {
      slots.release();
      return Promise.resolve(known);
    }
    let pending = storing.get(sha256);
    if (!pending) {
      stats.chunksStored += 1;
      stats.bytesStored += plain.length;
      pending = store.put(plain, sha256).finally(() => slots.release());
      pending.catch((err: unknown) => (failure ??= err));
      storing.set(sha256, pending);
    } else slots.release();
    return pending;
  };
  for await (const e of scanTree(root, owner)) {
    if (failure !== undefined) break;
    if (e.type !== "file") {
      entries.push(e.type === "dir" ? { type: "dir", path: e.path, mode: e.mode } : e.type === "symlink" ? { type: "symlink", path: e.path, target: e.target, mtimeMs: e.mtimeMs } : { type: "link", path: e.path, target: e.target });
      continue;
    }
    stats.files += 1;
    // The time before the stat bounds the ctime any later write can have (RACY_MARGIN_MS).
    const statAt = now();
    const st = fstatSync(e.fd);
    const prev = base?.files.get(e.path);
    const unchanged = prev !== undefined && prev.ino === st.ino && prev.size === st.size && prev.mtimeMs === st.mtimeMs && prev.ctimeMs === st.ctimeMs;
    let chunks: Array<Promise<ManifestChunk>>;
    let size = st.size;
    if (unchanged) chunks = prev.chunks.map((c) => Promise.resolve(c));
    else {
      stats.filesRead += 1;
      ({ chunks, size } = await readChunks(e.fd, st.size, slots, chunkOf));
    }
    entries.push({ type: "file", path: e.path, mode: e.mode, size, mtimeMs: st.mtimeMs, chunks });
    if (size === st.size && st.ctimeMs < statAt - RACY_MARGIN_MS) trusted.set(e.path, { ino: st.ino, size, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs });
  }
  const resolved = await Promise.all(entries.map(async (entry) => (entry.type === "file" ? { ...entry, chunks: await Promise.all(entry.chunks) } : entry)));
  if (failure !== undefined) throw failure;
  const files = new Map<string, IndexedFile>();
  const byHash = new Map<string, ManifestChunk>();
  for (const entry of resolved) {
    if (entry.type !== "file") continue;
    for (const c of entry.chunks) byHash.set(c.sha256, c);
    const stat = trusted.get(entry.path);
    if (stat) files.set(entry.path, { ...stat, chunks: entry.chunks });
  }
  return { manifest: { version: 1, entries: resolved }, index: { files, byHash }, stats };
}

/**
 * A file's chunks: read up to `size` bytes (a file that grew is cut there,
 * one that shrank ends where it ends), each chunk hashed and handed to
 * chunkOf while earlier ones are still being stored (at most the slots).
 */
async function readChunks(
  fd: number,
  size: number,
  slots: Slots,
  chunkOf: (plain: Buffer, sha256: string) => Promise<ManifestChunk>,
): Promise<{ chunks: Array<Promise<ManifestChunk>>; size: number }> {
  const chunks: Array<Promise<ManifestChunk>> = [];
  let pos = 0;
  while (pos < size) {
    const want = Math.min(MANIFEST_CHUNK_BYTES, size - pos);
    const buf = Buffer.allocUnsafe(want);
    let got = 0;
    while (got < want) {
      // Small files in one synchronous read (a thread-pool round trip costs more); large ones asynchronously.
      const n = size <= MANIFEST_CHUNK_BYTES ? readSync(fd, buf, got, want - got, pos + got) : (await readAsync(fd, buf, got, want - got, pos + got)).bytesRead;
      if (n === 0) break;
      got += n;
    }
    if (got === 0) break;
    const plain = got === want ? buf : buf.subarray(0, got);
    await slots.acquire();
    chunks.push(chunkOf(plain, sha256Url(plain)));
    pos += got;
    if (got < want) break;
  }
  return { chunks, size: pos };
}

/** Checks what the extractor cannot: every file's chunks add up to its size, and a hard link names an earlier file. */
function checkManifest(manifest: CheckpointManifest): void {
  const seen = new Set<string>();
  for (const entry of manifest.entries) {
    if (entry.type === "file") {
      if (entry.chunks.reduce((n, c) => n + c.bytes, 0) !== entry.size) throw new CheckpointError("checkpoint manifest is inconsistent");
      seen.add(entry.path);
    } else if (entry.type === "link" && !seen.has(entry.target)) throw new CheckpointError("checkpoint manifest is inconsistent");
  }
}

/** Files being filled at once: the descriptors a restore holds open, and enough work to keep the filler's window of gets full. */
const FILES_IN_FLIGHT = 16;

/**
 * Writes the manifest's tree into workspace through the archive extractor
 * (the checks and descriptor-relative writes of any restore): the tar holds
 * the tree with empty files, and each file's bytes are written by filler
 * into the descriptor the extractor opened. Then indexes what it wrote so
 * the next checkpoint reads only what the session changes.
 */
export async function restoreManifest(manifest: CheckpointManifest, workspace: string, owner: FileOwner | undefined, filler: FileFiller): Promise<LineageIndex> {
  checkManifest(manifest);
  const chunksOf = new Map<string, readonly ChunkAddress[]>();
  for (const e of manifest.entries) if (e.type === "file") chunksOf.set(e.path, e.chunks.map(addressOf));
  // A file's header is handed to the extractor only once a slot is free: it opens the file as it reads the header.
  const slots = new Slots(FILES_IN_FLIGHT);
  async function* tree(): AsyncGenerator<ManifestEntry> {
    for (const entry of manifest.entries) {
      if (entry.type === "file") await slots.acquire();
      yield entry.type === "file" ? { ...entry, size: 0 } : entry;
    }
  }
  // The extractor reports a failed fill as the archive's refusal; the fill's own error says more.
  let fillError: unknown;
  const fill = async (path: string, fd: number): Promise<void> => {
    try {
      const chunks = chunksOf.get(path);
      if (!chunks) throw new CheckpointError("checkpoint manifest is inconsistent");
      await filler.fill(fd, chunks);
    } catch (err) {
      throw (fillError ??= err);
    } finally {
      slots.release();
    }
  };
  try {
    await extractArchive(Readable.from(treeTar(tree(), () => noBytes())), workspace, undefined, { gzip: false, followRoot: false, owner, fill });
  } catch (err) {
    throw fillError ?? err;
  }
  // Past the coarse clock's tick: what was written now has a ctime a later write cannot repeat.
  await sleep(RACY_MARGIN_MS);
  return indexRestored(manifest, workspace, owner);
}

/** An empty file's bytes in the restore's tar (the filler writes the real ones). */
async function* noBytes(): AsyncGenerator<Buffer> {}

async function indexRestored(manifest: CheckpointManifest, workspace: string, owner: FileOwner | undefined): Promise<LineageIndex> {
  const wanted = new Map<string, Extract<ManifestEntry, { type: "file" }>>();
  const byHash = new Map<string, ManifestChunk>();
  for (const entry of manifest.entries) {
    if (entry.type !== "file") continue;
    wanted.set(entry.path, entry);
    for (const c of entry.chunks) byHash.set(c.sha256, c);
  }
  const files = new Map<string, IndexedFile>();
  const root = DirFd.open(workspace, { follow: false });
  try {
    for await (const e of scanTree(root, owner)) {
      if (e.type !== "file") continue;
      const entry = wanted.get(e.path);
      if (entry && e.stat.size === entry.size) files.set(e.path, { ino: e.stat.ino, size: entry.size, mtimeMs: e.stat.mtimeMs, ctimeMs: e.stat.ctimeMs, chunks: entry.chunks });
    }
  } finally {
    root.close();
  }
  return { files, byHash };
}

/** How many checkpoints' indexes a workspace keeps (the latest stored and the latest restored are enough). */
const INDEXES_PER_WORKSPACE = 2;
/** Workspaces indexed at once; the least recently used one is forgotten past this (its next checkpoint reads everything). */
const INDEXED_WORKSPACES = 512;

/**
 * The indexes of the checkpoints last stored or restored in each workspace
 * directory, by checkpoint ref. Only valid for that directory on this host
 * (inode numbers); a command names which refs it may build on.
 */
export class Lineages {
  private readonly byWorkspace = new Map<string, Map<string, LineageIndex>>();

  remember(workspace: string, ref: string, index: LineageIndex): void {
    const refs = this.byWorkspace.get(workspace) ?? new Map<string, LineageIndex>();
    this.byWorkspace.delete(workspace);
    refs.delete(ref);
    refs.set(ref, index);
    while (refs.size > INDEXES_PER_WORKSPACE) refs.delete(refs.keys().next().value as string);
    this.byWorkspace.set(workspace, refs);
    while (this.byWorkspace.size > INDEXED_WORKSPACES) this.byWorkspace.delete(this.byWorkspace.keys().next().value as string);
  }

  /** The index of the first of refs this workspace has one for. */
  find(workspace: string, refs: readonly string[]): LineageIndex | undefined {
    const held = this.byWorkspace.get(workspace);
    for (const ref of refs) {
      const index = held?.get(ref);
      if (index) return index;
    }
    return undefined;
  }

  forget(workspace: string): void {
    this.byWorkspace.delete(workspace);
  }
}
