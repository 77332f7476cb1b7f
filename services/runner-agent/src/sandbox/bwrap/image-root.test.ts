import { lstatSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { SpawnError } from "../../errors.ts";
import { imageCommandExists, prepareImageRoot } from "./image-root.ts";

const dirs: string[] = [];
const rootfs = () => {
  const d = mkdtempSync(join(tmpdir(), "paddock-image-root-"));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("prepareImageRoot", () => {
  it("makes the mount points an image lacks (bwrap cannot in a read-only root), twice in a row and concurrently", async () => {
    const root = rootfs();
    mkdirSync(join(root, "var"));
    await Promise.all([prepareImageRoot(root, "r/x:1"), prepareImageRoot(root, "r/x:1")]);
    await prepareImageRoot(root, "r/x:1");
    for (const p of ["proc", "dev", "tmp", "home", "run", "var/tmp"]) expect(lstatSync(join(root, p)).isDirectory(), p).toBe(true);
  });

  it("refuses a mount point that is a symlink or a file, never following it out of the rootfs", async () => {
    const outside = rootfs();
    const root = rootfs();
    symlinkSync(outside, join(root, "home"));
    await expect(prepareImageRoot(root, "r/x:1")).rejects.toThrow(SpawnError);
    await expect(prepareImageRoot(root, "r/x:1")).rejects.toThrow("image r/x:1: /home is not a directory, cannot mount /home there");
    const root2 = rootfs();
    mkdirSync(join(root2, "var"));
    writeFileSync(join(root2, "var", "tmp"), "");
    await expect(prepareImageRoot(root2, "r/x:1")).rejects.toThrow("image r/x:1: /var/tmp is not a directory, cannot mount /var/tmp there");
    const var2 = rootfs();
    symlinkSync(outside, join(var2, "var"));
    await expect(prepareImageRoot(var2, "r/x:1")).rejects.toThrow("/var is not a directory");
    expect(() => lstatSync(join(outside, "tmp"))).toThrow();
  });
});

describe("imageCommandExists", () => {
  it("finds a command in the image (absolute, or on PATH inside it), an absolute link included, never on the host", () => {
    const root = rootfs();
    mkdirSync(join(root, "bin"));
    writeFileSync(join(root, "bin", "busybox"), "");
    symlinkSync("/no/such/host/path", join(root, "bin", "vi"));
    expect(imageCommandExists(root, "/bin/busybox", "")).toBe(true);
    expect(imageCommandExists(root, "busybox", "/usr/bin:/bin")).toBe(true);
    expect(imageCommandExists(root, "vi", "/bin")).toBe(true);
    expect(imageCommandExists(root, "/usr/bin/env", "/usr/bin")).toBe(false);
    expect(imageCommandExists(root, "env", "/usr/bin:/bin")).toBe(false);
  });
});
