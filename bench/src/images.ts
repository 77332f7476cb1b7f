// Pulling and unpacking an image the first time (registry → verified OCI
// layout → umoci → rootfs in the cache), against plain fetches of the same
// blobs and `tar -x` of the layers in the same run; a cached second pull; and
// a session's start from the cached image against one on the host root.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { buildImage, pushImage, type BuiltImage, type TarEntry } from "@paddock/oci";
import { createImageStore, ImagesConfig } from "@paddock/runner-agent/images";
import { busyboxLayer, startRegistry, type RegistryHandle } from "@paddock/testing";
import { cachedImageStartBench } from "./image-start.ts";
import { removeLater } from "./leftovers.ts";
import { figure, percentile, type Figure } from "./stats.ts";

const run = promisify(execFile);
const MiB = 1024 * 1024;

/** busybox in one layer; `megabytes` of incompressible data in 4 MiB files over two more (gzip cannot shrink them). */
function benchImage(megabytes: number): BuiltImage {
  const data: TarEntry[][] = [[{ path: "data", type: "dir" }], []];
  for (let i = 0; i * 4 < megabytes; i++) {
    const size = Math.min(4, megabytes - i * 4) * MiB;
    (data[i % 2] as TarEntry[]).push({ path: `data/blob-${i}.bin`, type: "file", content: randomBytes(size) });
  }
  return buildImage({ layers: [busyboxLayer(), ...data], gzip: true });
}

/** The baseline: GET each blob to a file (no verification), then `tar -xzf` each layer into one directory. */
async function fetchAndUntar(registry: RegistryHandle, name: string, image: BuiltImage, dir: string): Promise<void> {
  const rootfs = join(dir, "rootfs");
  await mkdir(rootfs, { recursive: true });
  const files: string[] = [];
  for (const b of [image.config, ...image.layers]) {
    const res = await fetch(`${registry.url}/v2/${name}/blobs/${b.descriptor.digest}`);
    const file = join(dir, b.descriptor.digest.slice(7));
    await writeFile(file, Buffer.from(await res.arrayBuffer()));
    files.push(file);
  }
  for (const layer of files.slice(1)) await run("tar", ["-xzf", layer, "-C", rootfs]);
}

export async function imagesBench(opts: { megabytes: number; samples: number }): Promise<Figure[]> {
  const registry = await startRegistry();
  const work = await mkdtemp(join(tmpdir(), "paddock-bench-images-"));
  removeLater(work);
  try {
    const image = benchImage(opts.megabytes);
    const name = "bench/image";
    await pushImage({ baseUrl: registry.url, name }, "1", image);
    const ref = `${registry.host}/${name}:1`;
    const bytes = [image.config, ...image.layers].reduce((n, b) => n + b.descriptor.size, 0);
    const config = ImagesConfig.parse({ insecureRegistries: [registry.host] });
    const first: number[] = [];
    const baseline: number[] = [];
    const cached: number[] = [];
    for (let i = 0; i < opts.samples; i++) {
      const plain = join(work, `plain-${i}`);
      let start = performance.now();
      await fetchAndUntar(registry, name, image, plain);
      baseline.push(performance.now() - start);

      const store = createImageStore({ root: join(work, `cache-${i}`), config });
      await store.start();
      start = performance.now();
      (await store.pull(ref)).release();
      first.push(performance.now() - start);
      // A second session of the same image: no network, no unpack.
      start = performance.now();
      (await store.pull(ref)).release();
      cached.push(performance.now() - start);
      await store.stop();
    }
    const starts = await cachedImageStartBench(ref, config, Math.max(opts.samples * 4, 10));
    const p50 = (s: number[]) => percentile(s, 50);
    const baseName = "fetch blobs + tar -x";
    const label = `${Math.round(bytes / MiB)} MiB image`;
    return [
      figure({ bench: "images", metric: `first pull + unpack, ${label} (p50)`, value: p50(first), unit: "ms", baseline: { name: baseName, value: p50(baseline) } }),
      figure({ bench: "images", metric: `first pull + unpack throughput`, value: bytes / MiB / (p50(first) / 1000), unit: "MiB/s", baseline: { name: baseName, value: bytes / MiB / (p50(baseline) / 1000) } }),
      figure({ bench: "images", metric: "cached second pull (p50)", value: p50(cached), unit: "ms", baseline: { name: "first pull", value: p50(first) } }),
      ...starts,
    ];
  } finally {
    await registry.stop();
  }
}
