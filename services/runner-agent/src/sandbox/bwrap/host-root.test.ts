import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { NOT_BOUND, readHostRoot } from "./host-root.ts";

describe("the host root a session sees", () => {
  it("binds each top-level directory and file, recreates symlinks as symlinks, and leaves out what the sandbox makes itself", () => {
    const root = mkdtempSync(join(tmpdir(), "paddock-root-"));
    for (const d of ["usr", "etc", ...NOT_BOUND]) mkdirSync(join(root, d));
    symlinkSync("usr/bin", join(root, "bin"));
    writeFileSync(join(root, ".dockerenv"), "");
    expect(readHostRoot(root)).toEqual([
      { name: ".dockerenv", kind: "bind" },
      { name: "bin", kind: "symlink", target: "usr/bin" },
      { name: "etc", kind: "bind" },
      { name: "usr", kind: "bind" },
    ]);
  });

  it("on this host: /usr and /etc are there, /run and /proc are not", () => {
    const names = readHostRoot().map((e) => e.name);
    expect(names).toEqual(expect.arrayContaining(["usr", "etc"]));
    expect(names).not.toContain("run");
    expect(names).not.toContain("proc");
  });
});
