import { fstatSync, lstatSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync, writeSync } from "node:fs";
import { Readable } from "node:stream";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { scratchDirs } from "@paddock/testing";
import { extractArchive } from "./archive.ts";
import { ArchiveRejectedError } from "./errors.ts";
import { header } from "./tar-header.ts";
import { treeTar, type TreeEntry } from "./tree-tar.ts";

const dirs = scratchDirs("paddock-fill-");
afterEach(dirs.removeAll);

/** A tar of entries whose files are empty: their bytes come from fill. */
async function emptyTree(entries: TreeEntry[]): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const p of treeTar(entries, async function* () {})) parts.push(p);
  return Buffer.concat(parts);
}

const MTIME_MS = Date.UTC(2024, 0, 2, 3, 4, 5);

describe("extractArchive with fill", () => {
  it("writes each file's bytes by its descriptor, with the entry's path, mode and time (set after the fill)", async () => {
    const dst = dirs.make();
    const archive = await emptyTree([
      { type: "dir", path: "src", mode: 0o755 },
      { type: "file", path: "src/a.txt", mode: 0o640, size: 0, mtimeMs: MTIME_MS },
      { type: "file", path: "run.sh", mode: 0o755, size: 0, mtimeMs: MTIME_MS },
    ]);
    const asked: string[] = [];
    const fill = (path: string, fd: number): Promise<void> => {
      asked.push(path);
      // The descriptor names the new inode, still empty, and is open until the fill settles.
      expect(fstatSync(fd).size).toBe(0);
      writeSync(fd, Buffer.from(`bytes of ${path}\n`), 0, undefined, 0);
      return Promise.resolve();
    };
    const result = await extractArchive(Readable.from([archive]), dst, undefined, { gzip: false, fill });
    expect(asked).toEqual(["src/a.txt", "run.sh"]);
    expect(result.entries).toBe(4);
    expect(readFileSync(join(dst, "src/a.txt"), "utf8")).toBe("bytes of src/a.txt\n");
    expect(statSync(join(dst, "src/a.txt")).mode & 0o777).toBe(0o640);
    expect(statSync(join(dst, "run.sh")).mtimeMs).toBe(MTIME_MS);
  });

  it("fills a new inode renamed over a name already there (a file, or a link that is never written through)", async () => {
    const dst = dirs.make();
    const outside = join(dirs.make(), "outside.txt");
    writeFileSync(outside, "untouched\n");
    writeFileSync(join(dst, "old.txt"), "old bytes that are longer\n");
    symlinkSync(outside, join(dst, "link.txt"));
    const archive = await emptyTree([
      { type: "file", path: "old.txt", mode: 0o600, size: 0, mtimeMs: MTIME_MS },
      { type: "file", path: "link.txt", mode: 0o644, size: 0, mtimeMs: MTIME_MS },
    ]);
    await extractArchive(Readable.from([archive]), dst, undefined, { gzip: false, fill: (path, fd) => Promise.resolve(void writeSync(fd, `new ${path}\n`)) });
    expect(readFileSync(join(dst, "old.txt"), "utf8")).toBe("new old.txt\n");
    expect(statSync(join(dst, "old.txt")).mode & 0o777).toBe(0o600);
    expect(lstatSync(join(dst, "link.txt")).isFile()).toBe(true);
    expect(readFileSync(join(dst, "link.txt"), "utf8")).toBe("new link.txt\n");
    expect(readFileSync(outside, "utf8")).toBe("untouched\n");
    // No temporary name left behind.
    expect(readdirSync(dst).sort()).toEqual(["link.txt", "old.txt"]);
  });

  it("keeps each descriptor open until its fill settles, with fills overlapping", async () => {
    const dst = dirs.make();
    const archive = await emptyTree([0, 1, 2].map((i) => ({ type: "file", path: `f${i}`, mode: 0o644, size: 0, mtimeMs: MTIME_MS })));
    const pending: Array<() => void> = [];
    const fill = (path: string, fd: number) =>
      new Promise<void>((resolve) => {
        pending.push(() => {
          writeSync(fd, path);
          resolve();
        });
        if (pending.length === 3) for (const finish of pending.reverse()) finish();
      });
    await extractArchive(Readable.from([archive]), dst, undefined, { gzip: false, fill });
    for (const i of [0, 1, 2]) expect(readFileSync(join(dst, `f${i}`), "utf8")).toBe(`f${i}`);
  });

  it("refuses the archive when a fill fails, and when a file entry carries bytes of its own", async () => {
    const failing = await emptyTree([{ type: "file", path: "x", mode: 0o644, size: 0, mtimeMs: MTIME_MS }]);
    const err = await extractArchive(Readable.from([failing]), dirs.make(), undefined, { gzip: false, fill: () => Promise.reject(new Error("chunk gone")) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ArchiveRejectedError);

    const carrying = Buffer.concat([header({ path: "./y", type: "File", mode: 0o644, size: 3 }), Buffer.from("abc"), Buffer.alloc(509), Buffer.alloc(1024)]);
    const dst = dirs.make();
    await expect(extractArchive(Readable.from([carrying]), dst, undefined, { gzip: false, fill: () => Promise.resolve() })).rejects.toThrow(/carries bytes/);
  });

  it("never fills an entry the extraction refuses: a path out of the root", async () => {
    const dst = dirs.make();
    const archive = Buffer.concat([header({ path: "../out", type: "File", mode: 0o644, size: 0 }), Buffer.alloc(1024)]);
    const asked: string[] = [];
    await expect(
      extractArchive(Readable.from([archive]), dst, undefined, {
        gzip: false,
        fill: (path) => {
          asked.push(path);
          return Promise.resolve();
        },
      }),
    ).rejects.toBeInstanceOf(ArchiveRejectedError);
    expect(asked).toEqual([]);
    expect(readdirSync(dst)).toEqual([]);
  });
});
