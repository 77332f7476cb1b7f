// Images from files: an OCI layout directory and `docker save` archives.
import { afterEach, describe, expect, it } from "vitest";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { buildImage, digestHex, MediaType, REF_NAME_ANNOTATION, writeOciLayout, writeTar, type BuiltImage, type TarEntry } from "@paddock/oci";
import { busyboxLayer, scratchDirs } from "@paddock/testing";
import { ImageError } from "./errors.ts";
import { busyboxImage, count, leftovers, runInRootfs, startStore } from "./test-support.ts";

const scratch = scratchDirs("paddock-images-load-");
afterEach(() => scratch.removeAll());

const motd = (text: string): TarEntry[] => [{ path: "etc", type: "dir" }, { path: "etc/motd", type: "file", content: text }];

/** The legacy `docker save` form: <id>/layer.tar per layer, <config>.json, manifest.json. */
function legacyArchive(image: BuiltImage, tag: string, extra: TarEntry[] = [], layerPaths?: string[]): Buffer {
  const configName = `${digestHex(image.config.descriptor.digest)}.json`;
  const layers = layerPaths ?? image.layers.map((_, i) => `layer${i}/layer.tar`);
  const entries: TarEntry[] = image.layers.flatMap((l, i) => [
    { path: `layer${i}`, type: "dir" as const },
    { path: `layer${i}/layer.tar`, type: "file" as const, content: l.data },
  ]);
  entries.push({ path: configName, type: "file", content: image.config.data }, ...extra);
  entries.push({ path: "manifest.json", type: "file", content: JSON.stringify([{ Config: configName, RepoTags: [tag], Layers: layers }]) });
  return writeTar(entries);
}

async function failsWith(p: Promise<unknown>, code: string): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ImageError);
  expect((err as ImageError).code).toBe(code);
}

describe("load an image from files", () => {
  it("loads an OCI layout directory by tag, and the same layout again without unpacking", async () => {
    const dir = scratch.make();
    const a = busyboxImage({ extra: motd("image a\n") });
    const b = busyboxImage({ extra: motd("image b\n") });
    writeOciLayout(dir, [
      { tag: "a", image: a },
      { tag: "b", image: b },
    ]);
    const { store, events } = await startStore(scratch.make());
    const lease = await store.load({ format: "oci-layout", path: dir, tag: "b" });
    expect(lease.image.digest).toBe(b.manifest.descriptor.digest);
    expect(runInRootfs(lease.image.rootfs, ["/bin/busybox", "cat", "/etc/motd"]).stdout).toBe("image b\n");
    await store.load({ format: "oci-layout", path: dir, tag: "b" });
    expect(count(events, "unpack_start")).toBe(1);
    await failsWith(store.load({ format: "oci-layout", path: dir }), "invalid_reference");
    await failsWith(store.load({ format: "oci-layout", path: dir, tag: "c" }), "image_not_found");
  });

  it("refuses a layout whose blob is not what index.json names", async () => {
    const dir = scratch.make();
    const image = busyboxImage();
    writeOciLayout(dir, [{ tag: "t", image }]);
    const layer = image.layers[1];
    writeFileSync(join(dir, "blobs", "sha256", digestHex(layer?.descriptor.digest ?? "")), Buffer.alloc(layer?.descriptor.size ?? 0));
    const root = scratch.make();
    const { store } = await startStore(root);
    await failsWith(store.load({ format: "oci-layout", path: dir, tag: "t" }), "digest_mismatch");
    expect(leftovers(root)).toEqual({ entries: [], tmp: [] });
  });

  it("loads a legacy docker-archive (docker save) and the OCI layout a newer docker save writes", async () => {
    const image = buildImage({ layers: [busyboxLayer(), motd("from docker save\n")] });
    const dir = scratch.make();
    writeFileSync(join(dir, "legacy.tar"), legacyArchive(image, "paddock/busybox:1"));
    const { store } = await startStore(scratch.make());
    const legacy = await store.load({ format: "docker-archive", path: join(dir, "legacy.tar") });
    expect(runInRootfs(legacy.image.rootfs, ["/bin/sh", "-c", "echo hi; /bin/busybox cat /etc/motd"]).stdout).toBe("hi\nfrom docker save\n");
    expect(legacy.image.config.rootfs.diff_ids).toEqual(image.layers.map((l) => l.descriptor.digest));

    const layout = scratch.make();
    writeOciLayout(layout, [{ tag: "1", image }]);
    const entries: TarEntry[] = [
      { path: "oci-layout", type: "file", content: JSON.stringify({ imageLayoutVersion: "1.0.0" }) },
      { path: "blobs", type: "dir" },
      { path: "blobs/sha256", type: "dir" },
      ...[image.config, ...image.layers, image.manifest].map((b) => ({ path: `blobs/sha256/${digestHex(b.descriptor.digest)}`, type: "file" as const, content: b.data })),
      {
        path: "index.json",
        type: "file",
        content: JSON.stringify({ schemaVersion: 2, manifests: [{ ...image.manifest.descriptor, mediaType: MediaType.ociManifest, annotations: { [REF_NAME_ANNOTATION]: "1" } }] }),
      },
    ];
    writeFileSync(join(dir, "oci.tar"), writeTar(entries));
    const oci = await store.load({ format: "docker-archive", path: join(dir, "oci.tar") });
    expect(oci.image.digest).toBe(image.manifest.descriptor.digest);
    expect(runInRootfs(oci.image.rootfs, ["/bin/busybox", "cat", "/etc/motd"]).stdout).toBe("from docker save\n");
  });

  it("refuses docker-archives that name paths outside themselves or carry escaping links", async () => {
    const image = buildImage({ layers: [busyboxLayer()] });
    const dir = scratch.make();
    const root = scratch.make();
    const { store } = await startStore(root);
    writeFileSync(join(dir, "dotdot.tar"), legacyArchive(image, "x:1", [], ["../../../../etc/hostname"]));
    await failsWith(store.load({ format: "docker-archive", path: join(dir, "dotdot.tar") }), "image_unsupported");
    writeFileSync(join(dir, "link.tar"), legacyArchive(image, "x:1", [{ path: "outside", type: "symlink", linkname: "/etc" }], ["outside/hostname"]));
    await failsWith(store.load({ format: "docker-archive", path: join(dir, "link.tar") }), "image_unsupported");
    expect(leftovers(root)).toEqual({ entries: [], tmp: [] });
  });
});
