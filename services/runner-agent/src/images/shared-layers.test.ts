// Images that share a layer (a common base) against a real registry on
// loopback, through a proxy that counts what reaches it: the shared layer is
// downloaded once, by sequential and by concurrent pulls, and evicting an
// image never removes a layer another cached image still names.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { digestHex, pushImage, type BuiltImage } from "@paddock/oci";
import { scratchDirs, startRegistry, startRegistryProxy, type RegistryHandle, type RegistryProxy } from "@paddock/testing";
import { busyboxImage, count, runInRootfs, startStore } from "./test-support.ts";

const scratch = scratchDirs("paddock-images-shared-");
let registry: RegistryHandle;
let proxy: RegistryProxy;
/** Four images over one busybox base layer, each with a small layer of its own. */
const images: Record<string, BuiltImage> = Object.fromEntries(
  ["a", "b", "c", "d"].map((name) => [name, busyboxImage({ extra: [{ path: "name", type: "file", content: `${name}\n` }] })]),
);
const base = images.a?.layers[0]?.descriptor.digest ?? "";
const ref = (name: string) => `${proxy.host}/paddock/${name}:1`;

beforeAll(async () => {
  registry = await startRegistry();
  proxy = await startRegistryProxy(registry.url);
  for (const [name, image] of Object.entries(images)) await pushImage({ baseUrl: registry.url, name: `paddock/${name}` }, "1", image);
});
afterAll(async () => {
  await proxy?.stop();
  await registry?.stop();
});
afterEach(() => scratch.removeAll());

/** The blob digests fetched through the proxy since `from` (its log's length then), in order. */
function blobGets(from: number): string[] {
  return proxy.forwarded
    .slice(from)
    .filter((r) => r.startsWith("GET ") && r.includes("/blobs/"))
    .map((r) => r.slice(r.lastIndexOf("/") + 1));
}

const own = (image: BuiltImage | undefined) => [image?.config.descriptor.digest, image?.layers[1]?.descriptor.digest].sort();
const stored = (root: string) => readdirSync(join(root, "blobs", "sha256")).map((hex) => `sha256:${hex}`);

describe("images sharing a base layer", () => {
  it("the base layer is in all four images: the fixture shares it", () => {
    expect(Object.values(images).map((i) => i.layers[0]?.descriptor.digest)).toEqual([base, base, base, base]);
    expect(new Set(Object.values(images).map((i) => i.manifest.descriptor.digest)).size).toBe(4);
  });

  it("a second image downloads only its own blobs: the base layer comes from the blob store", async () => {
    const { store } = await startStore(scratch.make(), { insecureRegistries: [proxy.host] });
    const start = proxy.forwarded.length;
    const a = await store.pull(ref("a"));
    expect(blobGets(start).sort()).toEqual([base, ...own(images.a)].sort());
    const second = proxy.forwarded.length;
    const b = await store.pull(ref("b"));
    expect(blobGets(second).sort()).toEqual(own(images.b));
    expect(runInRootfs(b.image.rootfs, ["/bin/sh", "-c", "/bin/busybox cat /name"]).stdout).toBe("b\n");
    expect(runInRootfs(a.image.rootfs, ["/bin/sh", "-c", "/bin/busybox cat /name"]).stdout).toBe("a\n");
    a.release();
    b.release();
  });

  it("concurrent pulls (two of one image, one of another on the same base) fetch every blob once", async () => {
    const { store, events } = await startStore(scratch.make(), { insecureRegistries: [proxy.host] });
    const start = proxy.forwarded.length;
    const leases = await Promise.all([store.pull(ref("a")), store.pull(ref("a")), store.pull(ref("b"))]);
    const gets = blobGets(start);
    expect(gets.filter((d) => d === base)).toEqual([base]);
    expect(gets.sort()).toEqual([base, ...own(images.a), ...own(images.b)].sort());
    expect(leases[0]?.image.rootfs).toBe(leases[1]?.image.rootfs);
    expect(count(events, "unpack_start")).toBe(2);
    for (const l of leases) l.release();
  });

  it("eviction past the bound removes unheld images and only the blobs no cached image names", async () => {
    const root = scratch.make();
    // Every image is over the bound: each pull evicts whatever it may.
    const { store, events } = await startStore(root, { insecureRegistries: [proxy.host], maxCacheBytes: 1 });
    const evicted = () => events.filter((e) => e.type === "evicted").map((e) => e.digest);
    const a = await store.pull(ref("a"));
    const b = await store.pull(ref("b"));
    b.release();
    expect(evicted()).toEqual([]);
    // c's pull evicts b (not held), never a (held by a session): b's own blobs go, the base a and c share stays.
    const c = await store.pull(ref("c"));
    expect(evicted()).toEqual([images.b?.manifest.descriptor.digest]);
    expect(stored(root).sort()).toEqual([base, ...own(images.a), ...own(images.c)].sort());
    expect(runInRootfs(a.image.rootfs, ["/bin/sh", "-c", "/bin/busybox cat /name"]).stdout).toBe("a\n");
    a.release();
    c.release();
    // d finds the base in the store (downloads only its own), then its pull evicts a and c and their own blobs.
    const start = proxy.forwarded.length;
    const d = await store.pull(ref("d"));
    expect(blobGets(start).sort()).toEqual(own(images.d));
    expect(evicted().slice(1).sort()).toEqual([images.a?.manifest.descriptor.digest, images.c?.manifest.descriptor.digest].sort());
    expect(stored(root).sort()).toEqual([base, ...own(images.d)].sort());
    expect(existsSync(join(root, "blobs", "sha256", digestHex(base)))).toBe(true);
    expect(runInRootfs(d.image.rootfs, ["/bin/sh", "-c", "/bin/busybox cat /name"]).stdout).toBe("d\n");
    d.release();
  });
});
