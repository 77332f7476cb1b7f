// Helpers of the image tests: a busybox image, a store in a scratch dir that
// records its events, and running a command inside an unpacked rootfs.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { buildImage, type BuiltImage, type TarEntry } from "@paddock/oci";
import { busyboxLayer } from "@paddock/testing";
import { ImagesConfig } from "./config.ts";
import { createImageStore, type ImageEvent, type ImageStore, type ImageStoreDeps } from "./store.ts";

export function busyboxImage(opts: { extra?: TarEntry[]; docker?: boolean; architecture?: string } = {}): BuiltImage {
  return buildImage({
    layers: [busyboxLayer(), opts.extra ?? [{ path: "etc", type: "dir" }, { path: "etc/motd", type: "file", content: "hello from the image\n" }]],
    gzip: true,
    ...(opts.docker ? { docker: true } : {}),
    ...(opts.architecture ? { architecture: opts.architecture } : {}),
  });
}

export interface TestStore {
  store: ImageStore;
  events: ImageEvent[];
  root: string;
}

export async function startStore(root: string, config: Partial<ImagesConfig> = {}, credentials?: ImageStoreDeps["credentials"]): Promise<TestStore> {
  const events: ImageEvent[] = [];
  const store = createImageStore({ root, config: ImagesConfig.parse(config), onEvent: (e) => events.push(e), ...(credentials ? { credentials } : {}) });
  await store.start();
  return { store, events, root };
}

export function count(events: readonly ImageEvent[], type: ImageEvent["type"]): number {
  return events.filter((e) => e.type === type).length;
}

/** Runs argv with rootfs as `/` (read-only) in fresh namespaces; the rootfs is the whole filesystem it sees. */
export function runInRootfs(rootfs: string, argv: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync("bwrap", ["--ro-bind", rootfs, "/", "--unshare-all", "--die-with-parent", ...argv], { encoding: "utf8" });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Names under the store's entries/ and tmp/ dirs (what a failed pull must not leave). */
export function leftovers(root: string): { entries: string[]; tmp: string[] } {
  return { entries: readdirSync(join(root, "entries")), tmp: readdirSync(join(root, "tmp")) };
}
