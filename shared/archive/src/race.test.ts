import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { afterEach, describe, expect, it } from "vitest";
import { scratchDirs } from "@paddock/testing";
import { extractArchive, packDirectory, packInside } from "./archive.ts";
import { DESCRIPTOR_RELATIVE } from "./dir-fd.ts";
import { ArchiveRejectedError } from "./errors.ts";
import { resolveInside } from "./paths.ts";

/**
 * The sandbox writes its workspace while the runner packs or extracts it. These
 * tests play the sandbox at the worst moment: between the runner holding a
 * directory (or checking a path) and using an entry in it, a directory is
 * swapped for a symlink to a directory outside ("the attacker's target"), a
 * file for a symlink to a secret outside, or a file for a FIFO. Nothing
 * outside may be written, read or blocked on.
 */
const dirs = scratchDirs("paddock-race-");
afterEach(dirs.removeAll);

const SECRET = "SECRET-OUTSIDE-THE-WORKSPACE";

function world(): { workspace: string; outside: string } {
  const workspace = dirs.make();
  const outside = dirs.make();
  writeFileSync(join(outside, "secret.txt"), SECRET);
  return { workspace, outside };
}

/** Turns workspace/name into a symlink to target, moving the directory that was there aside (inside the workspace). */
function swapForLink(workspace: string, name: string, target: string): void {
  if (existsSync(join(workspace, name))) renameSync(join(workspace, name), join(workspace, `${name}.moved`));
  symlinkSync(target, join(workspace, name));
}

async function bytesOf(stream: ReadableStream<Uint8Array>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of Readable.fromWeb(stream as NodeWebReadableStream<Uint8Array>)) chunks.push(Buffer.from(c as Uint8Array));
  return Buffer.concat(chunks);
}

/** A gzipped tar of src (the files as given), made by GNU tar. */
function archiveOf(files: Record<string, string>): Readable {
  const src = dirs.make();
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(src, path, ".."), { recursive: true });
    writeFileSync(join(src, path), content);
  }
  return Readable.from([execFileSync("tar", ["-czf", "-", "-C", src, ...Object.keys(files)])]);
}

const listing = (archive: Buffer): string[] => execFileSync("tar", ["-tzvf", "-"], { input: archive }).toString().trim().split("\n");
const contents = (archive: Buffer): string => execFileSync("tar", ["-xzOf", "-"], { input: archive }).toString();

describe.runIf(DESCRIPTOR_RELATIVE)("a symlink swapped in between check and use", () => {
  it("extract: a directory swapped for a link after it was held keeps receiving the entries; nothing lands outside", async () => {
    const { workspace, outside } = world();
    const archive = archiveOf({ "sub/a.txt": "a", "sub/deeper/b.txt": "b", "sub/c.txt": "c" });
    const result = await extractArchive(archive, workspace, undefined, {
      hooks: {
        beforeEntry: (path) => {
          if (path === "sub/a.txt") swapForLink(workspace, "sub", outside);
        },
      },
    });
    expect(result.entries).toBeGreaterThanOrEqual(3);
    expect(readdirSync(outside)).toEqual(["secret.txt"]);
    expect(readFileSync(join(workspace, "sub.moved", "deeper", "b.txt"), "utf8")).toBe("b");
    expect(readFileSync(join(workspace, "sub.moved", "c.txt"), "utf8")).toBe("c");
  });

  it("extract: a directory swapped for a link before it is reached refuses the archive; nothing lands outside", async () => {
    const { workspace, outside } = world();
    mkdirSync(join(workspace, "sub"));
    const archive = archiveOf({ "a.txt": "a", "sub/b.txt": "b" });
    const err = await extractArchive(archive, workspace, undefined, {
      hooks: {
        beforeEntry: (path) => {
          if (path === "a.txt") swapForLink(workspace, "sub", outside);
        },
      },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ArchiveRejectedError);
    expect((err as ArchiveRejectedError).reason).toMatch(/symbolic link/);
    expect(readdirSync(outside)).toEqual(["secret.txt"]);
  });

  it("extract: a file swapped for a link to a file outside is replaced, not written through", async () => {
    const { workspace, outside } = world();
    writeFileSync(join(workspace, "a.txt"), "old");
    const archive = archiveOf({ "a.txt": "new" });
    await extractArchive(archive, workspace, undefined, {
      hooks: {
        beforeEntry: (path) => {
          if (path === "a.txt") {
            rmSync(join(workspace, "a.txt"));
            symlinkSync(join(outside, "secret.txt"), join(workspace, "a.txt"));
          }
        },
      },
    });
    expect(readFileSync(join(outside, "secret.txt"), "utf8")).toBe(SECRET);
    expect(lstatSync(join(workspace, "a.txt")).isFile()).toBe(true);
    expect(readFileSync(join(workspace, "a.txt"), "utf8")).toBe("new");
  });

  it("extract into a resolved target: the target swapped for a link after resolving still receives the entries", async () => {
    const { workspace, outside } = world();
    const target = await resolveInside(workspace, ["in", "here"], { create: true });
    try {
      renameSync(join(workspace, "in"), join(workspace, "in.moved"));
      symlinkSync(outside, join(workspace, "in"));
      mkdirSync(join(outside, "here"));
      await extractArchive(archiveOf({ "x.txt": "x" }), target.dir);
    } finally {
      target.close();
    }
    expect(readdirSync(join(outside, "here"))).toEqual([]);
    expect(readFileSync(join(workspace, "in.moved", "here", "x.txt"), "utf8")).toBe("x");
  });

  it("pack: a directory or file swapped for a link just before it is opened is packed as a link, never followed", async () => {
    const { workspace, outside } = world();
    mkdirSync(join(workspace, "sub"));
    writeFileSync(join(workspace, "sub", "ok.txt"), "ok");
    writeFileSync(join(workspace, "file.txt"), "mine");
    const archive = await bytesOf(
      packDirectory(workspace, {
        hooks: {
          beforeEntry: (rel) => {
            if (rel === "./file.txt") {
              rmSync(join(workspace, "file.txt"));
              symlinkSync(join(outside, "secret.txt"), join(workspace, "file.txt"));
            }
            if (rel === "./sub") swapForLink(workspace, "sub", outside);
          },
        },
      }),
    );
    expect(contents(archive)).not.toContain(SECRET);
    const lines = listing(archive);
    expect(lines.some((l) => l.startsWith("l") && l.includes("./sub -> "))).toBe(true);
    expect(lines.some((l) => l.startsWith("l") && l.includes("./file.txt -> "))).toBe(true);
  });

  it("pull of a resolved target: swapping it for a link afterwards packs the held directory, not the link's target", async () => {
    const { workspace, outside } = world();
    mkdirSync(join(workspace, "in"));
    writeFileSync(join(workspace, "in", "mine.txt"), "mine");
    const target = await resolveInside(workspace, ["in"], { create: false });
    let archive: Buffer;
    try {
      swapForLink(workspace, "in", outside);
      archive = await bytesOf(packInside(target));
    } finally {
      target.close();
    }
    expect(contents(archive)).toBe("mine");
  });

  it("pack: a file swapped for a FIFO before it is opened is left out without blocking", async () => {
    const { workspace } = world();
    writeFileSync(join(workspace, "a.txt"), "a");
    writeFileSync(join(workspace, "b.txt"), "b");
    const archive = await bytesOf(
      packDirectory(workspace, {
        hooks: {
          beforeEntry: (rel) => {
            if (rel === "./a.txt") {
              rmSync(join(workspace, "a.txt"));
              execFileSync("mkfifo", [join(workspace, "a.txt")]);
            }
          },
        },
      }),
    );
    expect(listing(archive).map((l) => l.split(" ").pop())).toEqual(["./", "./b.txt"]);
  });

  it("resolve: a FIFO as the pulled path is refused without blocking; a link on the way is refused", async () => {
    const { workspace, outside } = world();
    execFileSync("mkfifo", [join(workspace, "pipe")]);
    symlinkSync(outside, join(workspace, "out"));
    await expect(resolveInside(workspace, ["pipe"], { create: false })).rejects.toThrow(/not a file or directory/);
    await expect(resolveInside(workspace, ["out", "secret.txt"], { create: false })).rejects.toThrow(/symbolic link/);
    await expect(resolveInside(workspace, ["out", "x"], { create: true })).rejects.toThrow(/symbolic link/);
  });

  it("a workspace root that is itself a link is refused where the root must not be followed", async () => {
    const { workspace, outside } = world();
    const root = join(workspace, "root");
    symlinkSync(outside, root);
    await expect(bytesOf(packDirectory(root, { followRoot: false }))).rejects.toMatchObject({ code: expect.stringMatching(/^(ENOTDIR|ELOOP)$/) });
    await expect(extractArchive(archiveOf({ "x.txt": "x" }), root, undefined, { followRoot: false })).rejects.toMatchObject({ code: expect.stringMatching(/^(ENOTDIR|ELOOP)$/) });
    expect(readdirSync(outside)).toEqual(["secret.txt"]);
  });
});
