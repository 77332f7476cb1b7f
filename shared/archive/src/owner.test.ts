/**
 * The owner option (a sandboxed session's workspace, issue 23 item 5): every
 * inode an extraction makes (directories, files, symlinks, also under the
 * temporary name that replaces an existing one) belongs to the owner from the
 * moment it is made; a pack for an owner leaves out files of any other user.
 * Needs root (chown to another uid): skipped otherwise.
 */
import { execFileSync } from "node:child_process";
import { chownSync, lstatSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { afterEach, describe, expect, it } from "vitest";
import { scratchDirs } from "@paddock/testing";
import { extractArchive, resolveInside } from "./index.ts";
import { tarChunks } from "./pack.ts";

const dirs = scratchDirs("paddock-owner-");
afterEach(dirs.removeAll);
const root = process.getuid?.() === 0;
const owner = { uid: 54_321, gid: 54_322 };

async function tarOf(cwd: string, withOwner?: typeof owner): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of tarChunks(cwd, ["."], undefined, false, withOwner)) chunks.push(c);
  return Buffer.concat(chunks);
}

describe.runIf(root)("the owner option", () => {
  it("gives every directory, file and symlink an extraction makes to the owner, replaced names too", async () => {
    const src = dirs.make();
    mkdirSync(join(src, "a", "b"), { recursive: true });
    writeFileSync(join(src, "a", "b", "f.txt"), "new");
    writeFileSync(join(src, "top.txt"), "new");
    execFileSync("ln", ["-s", "b/f.txt", join(src, "a", "link")]);
    const archive = await tarOf(src);
    const dst = dirs.make();
    // An existing name is replaced through a temporary one: the new inode is the owner's too.
    writeFileSync(join(dst, "top.txt"), "old");
    await extractArchive(Readable.from([archive]), dst, undefined, { gzip: false, owner });
    for (const p of ["a", "a/b", "a/b/f.txt", "a/link", "top.txt"]) expect([p, lstatSync(join(dst, p)).uid, lstatSync(join(dst, p)).gid]).toEqual([p, owner.uid, owner.gid]);
    // The root was not made here: left as it was.
    expect(lstatSync(dst).uid).toBe(0);
  });

  it("gives the directories resolveInside makes to the owner", async () => {
    const dst = dirs.make();
    const target = await resolveInside(dst, ["x", "y"], { create: true, owner });
    target.close();
    for (const p of ["x", "x/y"]) expect(lstatSync(join(dst, p)).uid).toBe(owner.uid);
  });

  it("packs for an owner only the files the owner owns", async () => {
    const src = dirs.make();
    writeFileSync(join(src, "mine.txt"), "mine");
    chownSync(join(src, "mine.txt"), owner.uid, owner.gid);
    writeFileSync(join(src, "other.txt"), "not the owner's");
    const listed = (tar: Buffer) => execFileSync("tar", ["-tf", "-"], { input: tar }).toString().trim().split("\n").sort();
    expect(listed(await tarOf(src, owner))).toEqual(["./", "./mine.txt"]);
    expect(listed(await tarOf(src))).toEqual(["./", "./mine.txt", "./other.txt"]);
  });
});
