import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, linkSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, statSync, symlinkSync, writeFileSync, existsSync } from "node:fs";
import { Readable } from "node:stream";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { scratchDirs } from "@paddock/testing";
import { extractArchive } from "./archive.ts";
import { SYNC_PACK_MAX_BYTES, tarChunks } from "./pack.ts";

const dirs = scratchDirs("paddock-pack-");
const scratch = dirs.make;
afterEach(dirs.removeAll);

async function tarOf(cwd: string, entries: string[]): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of tarChunks(cwd, entries)) chunks.push(c);
  return Buffer.concat(chunks);
}

describe("tarChunks", () => {
  it("packs small files (sync reads), large ones (streamed), directories and links that GNU tar reads back byte for byte, leaving out FIFOs", async () => {
    const src = scratch();
    const big = randomBytes(SYNC_PACK_MAX_BYTES * 2 + 1234);
    writeFileSync(join(src, "big.bin"), big);
    mkdirSync(join(src, "a", "b"), { recursive: true });
    for (let i = 0; i < 50; i++) writeFileSync(join(src, "a", "b", `f${i}.txt`), `file ${i}\n`.repeat(i + 1));
    writeFileSync(join(src, "a", "exact.bin"), Buffer.alloc(SYNC_PACK_MAX_BYTES, 7));
    symlinkSync("b/f3.txt", join(src, "a", "link"));
    execFileSync("mkfifo", [join(src, "pipe")]);

    const archive = await tarOf(src, ["."]);
    const listed = execFileSync("tar", ["-tf", "-"], { input: archive }).toString().trim().split("\n");
    expect(listed).toContain("./big.bin");
    expect(listed).toContain("./a/b/f49.txt");
    expect(listed).not.toContain("./pipe");
    expect(listed).toHaveLength(1 + 1 + 2 + 50 + 1 + 1); // ., big.bin, a, a/b, 50 files, exact.bin, link

    const dst = scratch();
    execFileSync("tar", ["-xf", "-", "-C", dst], { input: archive });
    expect(readFileSync(join(dst, "big.bin")).equals(big)).toBe(true);
    expect(readFileSync(join(dst, "a", "exact.bin")).equals(Buffer.alloc(SYNC_PACK_MAX_BYTES, 7))).toBe(true);
    for (const i of [0, 17, 49]) expect(readFileSync(join(dst, "a", "b", `f${i}.txt`), "utf8")).toBe(`file ${i}\n`.repeat(i + 1));
    expect(lstatSync(join(dst, "a", "link")).isSymbolicLink()).toBe(true);
    expect(readlinkSync(join(dst, "a", "link"))).toBe("b/f3.txt");
    expect(existsSync(join(dst, "pipe"))).toBe(false);
  });

  it("extracts large files with overlapped writes whole, and a refusal after one leaves no descriptor open", async () => {
    const src = scratch();
    const bigs = [randomBytes(5 * SYNC_PACK_MAX_BYTES + 77), randomBytes(3 * SYNC_PACK_MAX_BYTES)];
    bigs.forEach((b, i) => writeFileSync(join(src, `big${i}.bin`), b));
    writeFileSync(join(src, "small.txt"), "small\n");
    const archive = await tarOf(src, ["."]);
    const dst = scratch();
    await extractArchive(Readable.from([archive]), dst, undefined, { gzip: false });
    bigs.forEach((b, i) => expect(readFileSync(join(dst, `big${i}.bin`)).equals(b)).toBe(true));
    expect(readFileSync(join(dst, "small.txt"), "utf8")).toBe("small\n");

    // The same archive with an entry it must refuse after the large files: the call rejects (never hangs) and closes what it opened.
    const fds = () => readdirSync("/proc/self/fd").length;
    const before = fds();
    const refused = Buffer.concat([archive.subarray(0, archive.length - 1024), execFileSync("tar", ["-cf", "-", "--absolute-names", "/etc/hostname"])]);
    await expect(extractArchive(Readable.from([refused]), scratch(), undefined, { gzip: false })).rejects.toThrow(/absolute|invalid/);
    expect(fds()).toBe(before);
  });

  it("packs one file under its own name, and an empty directory as just itself", async () => {
    const src = scratch();
    writeFileSync(join(src, "one.txt"), "only me\n");
    mkdirSync(join(src, "empty"));
    expect(execFileSync("tar", ["-tf", "-"], { input: await tarOf(src, ["one.txt"]) }).toString()).toBe("one.txt\n");
    expect(execFileSync("tar", ["-tf", "-"], { input: await tarOf(join(src, "empty"), ["."]) }).toString()).toBe("./\n");
  });

  it("leaves out a path that does not exist (gone while a live tree was walked)", async () => {
    const src = scratch();
    const archive = await tarOf(src, ["missing"]);
    // Only the end-of-archive blocks.
    expect(archive.equals(Buffer.alloc(1024))).toBe(true);
  });

  it("packs a second name of a file as a hard link, and extraction makes it one again, with files' and directories' modes", async () => {
    const src = scratch();
    mkdirSync(join(src, "d"));
    writeFileSync(join(src, "d", "one"), "shared bytes");
    linkSync(join(src, "d", "one"), join(src, "two"));
    writeFileSync(join(src, "empty"), "");
    chmodSync(join(src, "d"), 0o750);
    chmodSync(join(src, "d", "one"), 0o700);
    const archive = await tarOf(src, ["."]);
    expect(execFileSync("tar", ["-tvf", "-"], { input: archive }).toString()).toMatch(/^h.* \.\/two link to \.\/d\/one$/m);

    const dst = scratch();
    await extractArchive(Readable.from([archive]), dst, undefined, { gzip: false });
    expect(statSync(join(dst, "two")).ino).toBe(statSync(join(dst, "d", "one")).ino);
    expect(readFileSync(join(dst, "two"), "utf8")).toBe("shared bytes");
    expect(readFileSync(join(dst, "empty"), "utf8")).toBe("");
    expect(statSync(join(dst, "d")).mode & 0o777).toBe(0o750);
    expect(statSync(join(dst, "d", "one")).mode & 0o777).toBe(0o700);
  });

  it("extracts more directories than it keeps open, with a hard link across them", async () => {
    const src = scratch();
    // 127 directories and zz fill the 64 kept open exactly twice, so the link's own lookup is the one that evicts.
    for (let i = 0; i < 127; i++) {
      mkdirSync(join(src, `d${String(i).padStart(3, "0")}`));
      writeFileSync(join(src, `d${String(i).padStart(3, "0")}`, "f"), `file ${i}`);
    }
    mkdirSync(join(src, "zz"));
    linkSync(join(src, "d000", "f"), join(src, "zz", "link"));
    const dst = scratch();
    await extractArchive(Readable.from([await tarOf(src, ["."])]), dst, undefined, { gzip: false });
    expect(readFileSync(join(dst, "d126", "f"), "utf8")).toBe("file 126");
    expect(statSync(join(dst, "zz", "link")).ino).toBe(statSync(join(dst, "d000", "f")).ino);
  });
});
