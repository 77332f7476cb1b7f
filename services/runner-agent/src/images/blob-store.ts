// The image store's blobs (configs and compressed layers), content-addressed:
//   <root>/blobs/sha256/<hex>   verified against its digest before it appears
// Images that share a layer (a common base) download it once, and so do
// concurrent pulls: a download is single-flight per digest. A blob is kept
// while a cached image or a pull in progress refers to it (`pin`), and
// removed by `collect` once nothing does, so evicting an image never takes a
// layer another image (held by a session or not) still names.
import { randomUUID } from "node:crypto";
import { link, mkdir, readdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { type Descriptor, digestHex } from "@paddock/oci";
import type { ImageSource } from "./source.ts";
import { writeVerified } from "./verified-write.ts";

export interface BlobStore {
  start(): Promise<void>;
  /** The blob in the store, downloaded from source unless it is there already; answers its path. */
  ensure(source: ImageSource, desc: Descriptor): Promise<string>;
  /** Hard-links the stored blob to path (a layout for umoci, on the same filesystem). */
  linkTo(digest: string, path: string): Promise<void>;
  /** Keeps these blobs from `collect` until the returned function is called (a pull in progress). */
  pin(digests: readonly string[]): () => void;
  /** Bytes on disk per stored digest. */
  sizes(): Promise<Map<string, number>>;
  /** Removes every blob neither in `referenced` nor pinned; answers the bytes freed. */
  collect(referenced: ReadonlySet<string>): Promise<number>;
}

export function createBlobStore(root: string, tmp: string, onDownload: (desc: Descriptor) => void): BlobStore {
  const dir = join(root, "blobs", "sha256");
  const flights = new Map<string, Promise<void>>();
  const pins = new Map<string, number>();
  const pathOf = (digest: string) => join(dir, digestHex(digest));
  const present = (digest: string) => stat(pathOf(digest)).then((s) => s.isFile(), () => false);

  /** Downloads into tmp/, verified, then renames into place: a blob under blobs/ is always whole and right. */
  async function download(source: ImageSource, desc: Descriptor): Promise<void> {
    // Stored between this caller's look and its taking the flight (another flight just ended): nothing to fetch.
    if (await present(desc.digest)) return;
    onDownload(desc);
    const part = join(tmp, `blob-${randomUUID()}`);
    await writeVerified(await source.blob(desc), desc, part, source.what);
    await rename(part, pathOf(desc.digest));
  }

  async function ensure(source: ImageSource, desc: Descriptor): Promise<string> {
    for (;;) {
      if (await present(desc.digest)) return pathOf(desc.digest);
      const inflight = flights.get(desc.digest);
      if (!inflight) break;
      // Another image's download of it: wait, then look again (its source's failure is not this one's).
      await inflight.catch(() => undefined);
    }
    const flight = download(source, desc).finally(() => flights.delete(desc.digest));
    flights.set(desc.digest, flight);
    await flight;
    return pathOf(desc.digest);
  }

  function pin(digests: readonly string[]): () => void {
    for (const d of digests) pins.set(d, (pins.get(d) ?? 0) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      for (const d of digests) {
        const n = (pins.get(d) ?? 1) - 1;
        if (n <= 0) pins.delete(d);
        else pins.set(d, n);
      }
    };
  }

  async function sizes(): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    for (const hex of await readdir(dir).catch(() => [] as string[])) {
      const info = await stat(join(dir, hex)).catch(() => undefined);
      if (info?.isFile()) out.set(`sha256:${hex}`, info.size);
    }
    return out;
  }

  async function collect(referenced: ReadonlySet<string>): Promise<number> {
    let freed = 0;
    for (const [digest, size] of await sizes()) {
      if (referenced.has(digest) || pins.has(digest) || flights.has(digest)) continue;
      await rm(pathOf(digest), { force: true });
      freed += size;
    }
    return freed;
  }

  return {
    start: () => mkdir(dir, { recursive: true }).then(() => undefined),
    ensure,
    // A layout names a blob once, but a config and a layer could be the same bytes.
    linkTo: (digest, path) =>
      link(pathOf(digest), path).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== "EEXIST") throw err;
      }),
    pin,
    sizes,
    collect,
  };
}
