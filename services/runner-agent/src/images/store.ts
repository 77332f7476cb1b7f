// The image cache under the runner's data dir:
//   <root>/entries/<manifest hex>/{rootfs/, image.json}  complete images only
//   <root>/blobs/sha256/<hex>                             configs and layers (blob-store.ts), shared
//   <root>/refs/<sha256 of reference>.json                reference -> manifest digest
//   <root>/tmp/                                           work in progress, emptied at start
// An image is unpacked under tmp/ and renamed into entries/ in one step, so a
// killed runner leaves at most a tmp/ dir, never a half rootfs under entries/.
// Pulls of one image share one download and unpack (single flight); images
// sharing a layer share its blob. Eviction removes images no session holds,
// then the blobs no remaining image names.
import { randomUUID } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { digestHex, ImageConfig, sha256Digest } from "@paddock/oci";
import { createBlobStore } from "./blob-store.ts";
import type { ImagesConfig } from "./config.ts";
import { writeLayout, LAYOUT_TAG } from "./layout-writer.ts";
import { dockerArchiveSource, layoutSource } from "./load.ts";
import { hostPlatform, type Platform } from "./manifest.ts";
import { registrySource } from "./pull.ts";
import { parseReference } from "./reference.ts";
import { RegistryClient, type RegistryCredentials } from "./registry-client.ts";
import type { ImageSource } from "./source.ts";
import { sweepAndMeasure, umociUnpack } from "./unpack.ts";
import { ImageError, ImageErrorCode } from "./errors.ts";

/** Tries of a pull whose image an eviction took before it was leased (only a cache too small for what is in use). */
const MAX_ATTEMPTS = 3;

export interface CachedImage {
  /** The single-platform manifest's digest. */
  digest: string;
  /** Unpacked root filesystem; read-only by convention (sessions mount it read-only). */
  rootfs: string;
  config: ImageConfig;
  bytes: number;
}

/** A cached image held for a session: not evicted until released. */
export interface ImageLease {
  image: CachedImage;
  release(): void;
}

export type ImageEvent =
  | { type: "hit"; digest: string }
  | { type: "blob"; digest: string }
  | { type: "unpack_start"; digest: string; dir: string }
  | { type: "stored"; digest: string; bytes: number }
  | { type: "evicted"; digest: string };

export interface ImageStoreDeps {
  /** The cache's directory, e.g. <dataDir>/images. */
  root: string;
  config: ImagesConfig;
  credentials?: (registry: string) => RegistryCredentials | undefined;
  platform?: Platform;
  /** Progress for logs, metrics and tests. */
  onEvent?: (event: ImageEvent) => void;
}

export type LoadRequest = { format: "oci-layout" | "docker-archive"; path: string; tag?: string };

export interface ImageStore {
  start(): Promise<void>;
  stop(): Promise<void>;
  /** The image a reference names, from the cache when a pull of it is cached (no network), else pulled. */
  pull(reference: string, opts?: { refresh?: boolean }): Promise<ImageLease>;
  /** An image from an OCI layout directory or a docker-archive file. */
  load(request: LoadRequest): Promise<ImageLease>;
  /** The cached image with this manifest digest, if any (no lease). */
  cached(digest: string): Promise<CachedImage | undefined>;
}

interface EntryRecord {
  digest: string;
  config: ImageConfig;
  /** The rootfs's bytes. */
  bytes: number;
  /** The blobs it was unpacked from (config, layers): kept while it is cached. */
  blobs?: string[];
}

interface EntryInfo {
  digest: string;
  bytes: number;
  blobs: readonly string[];
  usedMs: number;
}

export function createImageStore(deps: ImageStoreDeps): ImageStore {
  const { root, config } = deps;
  const platform = deps.platform ?? hostPlatform();
  const entries = join(root, "entries");
  const refs = join(root, "refs");
  const tmp = join(root, "tmp");
  const client = new RegistryClient({ ...config, ...(deps.credentials ? { credentials: deps.credentials } : {}) });
  const flights = new Map<string, Promise<CachedImage>>();
  const leases = new Map<string, number>();
  const emit = (e: ImageEvent) => deps.onEvent?.(e);
  const rootless = process.getuid?.() !== 0;
  const blobs = createBlobStore(root, tmp, (d) => emit({ type: "blob", digest: d.digest }));
  /** Evictions run one at a time (two would rename the same entry). */
  let evicting: Promise<void> = Promise.resolve();

  const entryDir = (digest: string) => join(entries, digestHex(digest));

  async function cached(digest: string): Promise<CachedImage | undefined> {
    try {
      const record = JSON.parse(await readFile(join(entryDir(digest), "image.json"), "utf8")) as EntryRecord;
      return { digest, rootfs: join(entryDir(digest), "rootfs"), config: ImageConfig.parse(record.config), bytes: record.bytes };
    } catch {
      return undefined;
    }
  }

  function singleFlight(key: string, work: () => Promise<CachedImage>): Promise<CachedImage> {
    const inflight = flights.get(key);
    if (inflight) return inflight;
    const p = work().finally(() => flights.delete(key));
    flights.set(key, p);
    return p;
  }

  /** Download to tmp/, unpack there, rename into entries/: the only way an entry appears. */
  async function materialize(source: ImageSource): Promise<CachedImage> {
    const hit = await cached(source.digest);
    if (hit) {
      emit({ type: "hit", digest: source.digest });
      return hit;
    }
    const work = join(tmp, randomUUID());
    await mkdir(work, { recursive: true });
    const used = [source.manifest.config.digest, ...source.manifest.layers.map((l) => l.digest)];
    const unpin = blobs.pin(used);
    try {
      const layout = await writeLayout(source, join(work, "layout"), { platform, parallelDownloads: config.parallelDownloads, store: blobs });
      const staged = join(work, "entry");
      await mkdir(staged);
      emit({ type: "unpack_start", digest: source.digest, dir: work });
      await umociUnpack(layout.dir, LAYOUT_TAG, join(staged, "rootfs"), { umociPath: config.umociPath, rootless });
      const { bytes } = await sweepAndMeasure(join(staged, "rootfs"));
      const record: EntryRecord = { digest: source.digest, config: layout.config, bytes, blobs: [...new Set(used)] };
      await writeFile(join(staged, "image.json"), JSON.stringify(record));
      await rename(staged, entryDir(source.digest));
      emit({ type: "stored", digest: source.digest, bytes });
      return { digest: source.digest, rootfs: join(entryDir(source.digest), "rootfs"), config: layout.config, bytes };
    } finally {
      unpin();
      await rm(work, { recursive: true, force: true });
    }
  }

  function lease(image: CachedImage): ImageLease {
    leases.set(image.digest, (leases.get(image.digest) ?? 0) + 1);
    let released = false;
    return {
      image,
      release: () => {
        if (released) return;
        released = true;
        const n = (leases.get(image.digest) ?? 1) - 1;
        if (n <= 0) leases.delete(image.digest);
        else leases.set(image.digest, n);
      },
    };
  }

  /**
   * Leases the image, marks it used (eviction order), and evicts others past
   * the cache size. An eviction that ran between the image's making (or
   * finding) and this lease may have taken it: then `again` gets it anew.
   */
  async function handOut(image: CachedImage, again: (attempt: number) => Promise<ImageLease>, attempt: number): Promise<ImageLease> {
    const held = lease(image);
    // Evictions begun before the lease may still take it; one begun after skips it. Wait for the former, then look.
    await evicting;
    if (!(await cached(image.digest))) {
      held.release();
      if (attempt >= MAX_ATTEMPTS) throw new ImageError(ImageErrorCode.unavailable, "image evicted as it was made: the cache is too small for the images in use");
      return again(attempt + 1);
    }
    const now = new Date();
    await utimes(join(entryDir(held.image.digest), "image.json"), now, now).catch(() => undefined);
    const next = evicting.then(evict);
    evicting = next.catch(() => undefined);
    await next;
    return held;
  }

  async function listEntries(): Promise<EntryInfo[]> {
    const all: EntryInfo[] = [];
    for (const hex of await readdir(entries).catch(() => [] as string[])) {
      const file = join(entries, hex, "image.json");
      const [text, info] = await Promise.all([readFile(file, "utf8").catch(() => undefined), stat(file).catch(() => undefined)]);
      if (!text || !info) continue;
      const record = JSON.parse(text) as EntryRecord;
      all.push({ digest: `sha256:${hex}`, bytes: record.bytes, blobs: record.blobs ?? [], usedMs: info.mtimeMs });
    }
    return all;
  }

  const blobsOf = (kept: Iterable<EntryInfo>) => new Set([...kept].flatMap((e) => e.blobs));

  /**
   * Past maxCacheBytes (rootfs bytes plus blob bytes), removes least recently
   * used images that no session holds and no pull is making, and with each the
   * blobs no remaining image names: a layer an image still cached shares
   * (held or not) stays.
   */
  async function evict(): Promise<void> {
    const all = await listEntries();
    const sizes = await blobs.sizes();
    let total = all.reduce((sum, e) => sum + e.bytes, 0) + [...sizes.values()].reduce((a, b) => a + b, 0);
    const kept = new Set(all);
    // Blobs of failed pulls first: a retry would have reused them, but they hold no image.
    if (total > config.maxCacheBytes) total -= await blobs.collect(blobsOf(kept));
    for (const e of [...all].sort((a, b) => a.usedMs - b.usedMs)) {
      if (total <= config.maxCacheBytes) return;
      if (leases.has(e.digest) || flights.has(`digest:${e.digest}`)) continue;
      // Out of entries/ in one rename, then removed at leisure.
      const gone = join(tmp, `evicted-${digestHex(e.digest)}-${randomUUID()}`);
      await rename(entryDir(e.digest), gone);
      await rm(gone, { recursive: true, force: true });
      kept.delete(e);
      total -= e.bytes;
      total -= await blobs.collect(blobsOf(kept));
      emit({ type: "evicted", digest: e.digest });
    }
  }

  async function fromSource(open: () => Promise<ImageSource>, refFile?: { file: string; reference: string }): Promise<CachedImage> {
    const source = await open();
    try {
      const image = await singleFlight(`digest:${source.digest}`, () => materialize(source));
      if (refFile) await writeAtomic(refFile.file, JSON.stringify({ reference: refFile.reference, digest: image.digest }));
      return image;
    } finally {
      await source.dispose();
    }
  }

  async function writeAtomic(file: string, text: string): Promise<void> {
    const part = join(tmp, `ref-${randomUUID()}`);
    await writeFile(part, text);
    await rename(part, file);
  }

  async function pull(reference: string, opts: { refresh?: boolean } = {}, attempt = 1): Promise<ImageLease> {
    const again = (n: number) => pull(reference, opts, n);
    const ref = parseReference(reference);
    const refFile = join(refs, `${digestHex(sha256Digest(ref.canonical))}.json`);
    if (!opts.refresh) {
      // A digest that is itself a cached manifest needs no ref file (pulled before under a tag, or loaded).
      const known = (ref.digest && (await cached(ref.digest)) ? ref.digest : undefined) ?? (await readFile(refFile, "utf8").then((t) => (JSON.parse(t) as { digest: string }).digest, () => undefined));
      const hit = known ? await cached(known) : undefined;
      if (hit) {
        emit({ type: "hit", digest: hit.digest });
        return handOut(hit, again, attempt);
      }
    }
    const image = await singleFlight(`ref:${ref.canonical}`, () =>
      fromSource(() => registrySource(client, ref, { platform, maxImageBytes: config.maxImageBytes }), { file: refFile, reference: ref.canonical }),
    );
    return handOut(image, again, attempt);
  }

  async function load(request: LoadRequest, attempt = 1): Promise<ImageLease> {
    const again = (n: number) => load(request, n);
    const opts = { platform, maxImageBytes: config.maxImageBytes };
    if (request.format === "oci-layout") return handOut(await fromSource(() => layoutSource(request.path, request.tag, opts)), again, attempt);
    const work = join(tmp, `archive-${randomUUID()}`);
    await mkdir(work, { recursive: true });
    try {
      return await handOut(await fromSource(() => dockerArchiveSource(request.path, work, request.tag, opts)), again, attempt);
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  return {
    start: async () => {
      await mkdir(entries, { recursive: true });
      await mkdir(refs, { recursive: true });
      // Whatever a previous run left half-done (a download, an unpack killed mid-way) is never used: remove it.
      await rm(tmp, { recursive: true, force: true });
      await mkdir(tmp, { recursive: true });
      await blobs.start();
      // Blobs of a pull that never became an image (a killed runner) are named by none: removed.
      await blobs.collect(blobsOf(await listEntries()));
    },
    stop: async () => {
      await Promise.allSettled([...flights.values()]);
      await evicting;
    },
    pull,
    load,
    cached,
  };
}
