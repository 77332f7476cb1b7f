// The cache: hostile layers stay inside their rootfs, a killed unpack is never
// used, and images not in use are evicted past the size bound.
import { afterEach, describe, expect, it } from "vitest";
import { spawn, spawnSync } from "node:child_process";
import { createReadStream, existsSync, lstatSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { buildImage, writeOciLayout } from "@paddock/oci";
import { busyboxLayer, repoRoot, scratchDirs } from "@paddock/testing";
import { ImageError } from "./errors.ts";
import { busyboxImage, count, leftovers, runInRootfs, startStore } from "./test-support.ts";

const scratch = scratchDirs("paddock-images-store-");
afterEach(() => scratch.removeAll());

describe("image cache", () => {
  it("a hostile layer writes nothing outside its rootfs and keeps no device node, FIFO or escape", async () => {
    const outside = scratch.make();
    const image = buildImage({
      layers: [
        busyboxLayer(),
        [
          { path: "../escaped-dotdot", type: "file", content: "x" },
          { path: "../../../../../../../tmp/escaped-deep", type: "file", content: "x" },
          { path: `/${outside.slice(1)}/escaped-absolute`, type: "file", content: "x" },
          { path: "out", type: "symlink", linkname: outside },
          { path: "out/escaped-through-link", type: "file", content: "x" },
          { path: "rel", type: "symlink", linkname: "../../../../../../.." + outside },
          { path: "rel/escaped-through-relative-link", type: "file", content: "x" },
          { path: "dev", type: "dir" },
          { path: "dev/mem", type: "char", devmajor: 1, devminor: 1 },
          { path: "dev/sda", type: "block", devmajor: 8, devminor: 0 },
          { path: "pipe", type: "fifo" },
        ],
      ],
    });
    const layout = scratch.make();
    writeOciLayout(layout, [{ tag: "t", image }]);
    const root = scratch.make();
    const { store } = await startStore(root);
    const { image: cached } = await store.load({ format: "oci-layout", path: layout, tag: "t" });
    expect(readdirSync(outside)).toEqual([]);
    expect(existsSync("/tmp/escaped-deep")).toBe(false);
    expect(readdirSync(root).sort()).toEqual(["blobs", "entries", "refs", "tmp"]);
    // What the layer aimed outside landed inside, where it is harmless.
    expect(lstatSync(join(cached.rootfs, "escaped-dotdot")).isFile()).toBe(true);
    expect(lstatSync(join(cached.rootfs, outside, "escaped-through-link")).isFile()).toBe(true);
    expect(readdirSync(join(cached.rootfs, "dev"))).toEqual([]);
    expect(existsSync(join(cached.rootfs, "pipe"))).toBe(false);
    expect(runInRootfs(cached.rootfs, ["/bin/sh", "-c", "echo hi"]).stdout).toBe("hi\n");
  });

  it("a layer umoci cannot apply (a hard link to nothing) is unpack_failed and leaves nothing", async () => {
    const image = buildImage({ layers: [busyboxLayer(), [{ path: "hl", type: "hardlink", linkname: "/etc/shadow" }]] });
    const layout = scratch.make();
    writeOciLayout(layout, [{ tag: "t", image }]);
    const root = scratch.make();
    const { store } = await startStore(root);
    const err = await store.load({ format: "oci-layout", path: layout, tag: "t" }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ImageError);
    expect((err as ImageError).code).toBe("unpack_failed");
    expect(leftovers(root)).toEqual({ entries: [], tmp: [] });
  });

  it("an unpack killed mid-way leaves no entry; the next start clears it and unpacks afresh", async () => {
    const dir = scratch.make();
    const layout = join(dir, "layout");
    writeOciLayout(layout, [{ tag: "t", image: busyboxImage() }]);
    const fifo = join(dir, "unpacked.fifo");
    expect(spawnSync("mkfifo", [fifo]).status).toBe(0);
    // umoci, then a report on the FIFO, then blocked until killed: the kill lands after the unpack, before the rename.
    const umoci = join(dir, "umoci-then-block");
    writeFileSync(umoci, `#!/bin/sh\n/usr/bin/umoci "$@" || exit $?\necho unpacked > ${JSON.stringify(fifo)}\nexec sleep 3600\n`, { mode: 0o755 });
    const root = join(dir, "cache");
    mkdirSync(root);
    const child = spawn(process.execPath, ["--import", "tsx", resolve(import.meta.dirname, "interrupt-child.ts"), root, layout, umoci], {
      cwd: repoRoot,
      detached: true,
      stdio: "ignore",
    });
    const exited = new Promise<unknown>((r) => child.once("exit", r));
    const line = await new Promise<string>((r) => createReadStream(fifo, "utf8").once("data", (d) => r(String(d))));
    expect(line).toBe("unpacked\n");
    process.kill(-(child.pid as number), "SIGKILL");
    await exited;
    const left = leftovers(root);
    expect(left.entries).toEqual([]);
    expect(left.tmp.length).toBe(1);

    const { store, events } = await startStore(root);
    expect(leftovers(root)).toEqual({ entries: [], tmp: [] });
    const lease = await store.load({ format: "oci-layout", path: layout, tag: "t" });
    expect(count(events, "unpack_start")).toBe(1);
    expect(runInRootfs(lease.image.rootfs, ["/bin/sh", "-c", "echo hi"]).stdout).toBe("hi\n");
  });

  it("evicts the least recently used images not in use once past maxCacheBytes", async () => {
    const layout = scratch.make();
    const images = ["a", "b", "c"].map((t) => ({ tag: t, image: busyboxImage({ extra: [{ path: "tag", type: "file", content: t }] }) }));
    writeOciLayout(layout, images);
    const size = 2_000_000; // busybox is ~1.9 MB: room for one image, not two
    const { store, events } = await startStore(scratch.make(), { maxCacheBytes: size });
    const a = await store.load({ format: "oci-layout", path: layout, tag: "a" });
    a.release();
    const b = await store.load({ format: "oci-layout", path: layout, tag: "b" });
    expect(events.filter((e) => e.type === "evicted").map((e) => e.digest)).toEqual([a.image.digest]);
    expect(await store.cached(a.image.digest)).toBeUndefined();
    // b is held by a session: loading c goes over the bound rather than take b away.
    const c = await store.load({ format: "oci-layout", path: layout, tag: "c" });
    expect(await store.cached(b.image.digest)).toBeDefined();
    expect(await store.cached(c.image.digest)).toBeDefined();
    expect(count(events, "evicted")).toBe(1);
    b.release();
    c.release();
  });
});
