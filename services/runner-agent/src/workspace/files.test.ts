/**
 * listInside: a directory's entries as the files routes list them. The
 * end-to-end behaviour (routes, owners, links) is in test/e2e/files.test.ts;
 * here the edges of the walk itself: the entry cap, depth order, and the
 * working directory it borrows for its stats.
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MAX_LIST_ENTRIES } from "@paddock/contracts";
import { listInside } from "./files.ts";

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "paddock-list-"));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

function files(dir: string, n: number): void {
  mkdirSync(join(root, dir), { recursive: true });
  for (let i = 0; i < n; i++) writeFileSync(join(root, dir, `f${String(i).padStart(6, "0")}`), "");
}

describe("listInside", () => {
  it("lists exactly the cap without calling it truncated, and one more as truncated at the cap", async () => {
    files("full", MAX_LIST_ENTRIES);
    const full = await listInside(root, ["full"], 1, undefined);
    expect(full.entries).toHaveLength(MAX_LIST_ENTRIES);
    expect(full.truncated).toBe(false);
    files("over", MAX_LIST_ENTRIES + 1);
    const over = await listInside(root, ["over"], 1, undefined);
    expect(over.entries).toHaveLength(MAX_LIST_ENTRIES);
    expect(over.truncated).toBe(true);
    expect(over.entries.at(-1)?.path).toBe(`over/f${String(MAX_LIST_ENTRIES - 1).padStart(6, "0")}`);
  });

  it("walks depth first in name order, lists a link as a link without following it, and gives the working directory back", async () => {
    const cwd = process.cwd();
    mkdirSync(join(root, "a/b"), { recursive: true });
    writeFileSync(join(root, "a/b/deep.txt"), "deep");
    writeFileSync(join(root, "a/z.txt"), "zz");
    symlinkSync("/etc", join(root, "a/link"));
    const list = await listInside(root, [], 3, undefined);
    expect(list.entries.map((e) => `${e.type} ${e.path}`)).toEqual(["dir a", "dir a/b", "file a/b/deep.txt", "symlink a/link", "file a/z.txt"]);
    expect(list.entries.find((e) => e.path === "a/z.txt")).toMatchObject({ size: 2 });
    expect(process.cwd()).toBe(cwd);
  });

  it("stops at the cap inside a subdirectory and says so, however many entries follow it", async () => {
    files("d/sub", MAX_LIST_ENTRIES);
    writeFileSync(join(root, "d/zz"), "");
    const list = await listInside(root, ["d"], 2, undefined);
    expect(list.entries).toHaveLength(MAX_LIST_ENTRIES);
    expect(list.entries[0]?.path).toBe("d/sub");
    expect(list.truncated).toBe(true);
  });
});
