import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { describe, expect, it } from "vitest";
import { entryViolation, extractArchive, packDirectory } from "./archive.ts";
import { ArchiveRefusedError } from "../errors.ts";
import { maliciousTar, tarEntry } from "../testing/test-support.ts";

function sandbox(): { root: string; dir: string } {
  const root = mkdtempSync(join(tmpdir(), "paddock-archive-"));
  const dir = join(root, "workspace");
  mkdirSync(dir);
  return { root, dir };
}

describe("entryViolation", () => {
  it("accepts workspace-relative files, directories and links that stay inside", () => {
    expect(entryViolation({ path: "./a/b.txt", type: "File" })).toBeUndefined();
    expect(entryViolation({ path: "a/", type: "Directory" })).toBeUndefined();
    expect(entryViolation({ path: "a/link", type: "SymbolicLink", linkpath: "../b.txt" })).toBeUndefined();
  });

  it("refuses absolute paths, .., escaping links and devices", () => {
    expect(entryViolation({ path: "/etc/passwd", type: "File" })).toBe("absolute path");
    expect(entryViolation({ path: "a/../../x", type: "File" })).toBe("path contains ..");
    expect(entryViolation({ path: "link", type: "SymbolicLink", linkpath: "/etc" })).toBe("absolute link target");
    expect(entryViolation({ path: "a/link", type: "SymbolicLink", linkpath: "../../x" })).toBe("link escapes the workspace");
    expect(entryViolation({ path: "hard", type: "Link", linkpath: "../x" })).toBe("link escapes the workspace");
    expect(entryViolation({ path: "null", type: "CharacterDevice" })).toMatch(/unsupported entry type/);
    expect(entryViolation({ path: "fifo", type: "FIFO" })).toMatch(/unsupported entry type/);
  });
});

describe("extractArchive", () => {
  it("round-trips a workspace packed as a stream", async () => {
    const src = sandbox();
    mkdirSync(join(src.dir, "sub"));
    writeFileSync(join(src.dir, "sub", "file.txt"), "content");
    symlinkSync("sub/file.txt", join(src.dir, "link"));
    const dst = sandbox();
    await extractArchive(Readable.fromWeb(packDirectory(src.dir) as NodeWebReadableStream<Uint8Array>), dst.dir);
    expect(readFileSync(join(dst.dir, "sub", "file.txt"), "utf8")).toBe("content");
    expect(readFileSync(join(dst.dir, "link"), "utf8")).toBe("content");
  });

  it("round-trips a workspace larger than the packer's lookahead byte for byte, as plain gzip, leaving out FIFOs", async () => {
    const src = sandbox();
    // 6 MiB of varied bytes (more than the 4 MiB the packer reads ahead) and many small files.
    const big = Buffer.alloc(6 * 1024 * 1024);
    for (let i = 0; i < big.length; i++) big[i] = (i * 2654435761) >>> 24;
    writeFileSync(join(src.dir, "big.bin"), big);
    for (let i = 0; i < 300; i++) {
      mkdirSync(join(src.dir, `d${i % 7}`), { recursive: true });
      writeFileSync(join(src.dir, `d${i % 7}`, `f${i}.txt`), `file ${i}\n`.repeat(i + 1));
    }
    execFileSync("mkfifo", [join(src.dir, "pipe")]);
    const chunks: Buffer[] = [];
    for await (const c of Readable.fromWeb(packDirectory(src.dir) as NodeWebReadableStream<Uint8Array>)) chunks.push(Buffer.from(c as Uint8Array));
    const archive = Buffer.concat(chunks);
    // The gzip magic: any gunzip (and `tar -xz`) reads it.
    expect([archive[0], archive[1]]).toEqual([0x1f, 0x8b]);
    const dst = sandbox();
    const result = await extractArchive(Readable.from([archive]), dst.dir);
    expect(readFileSync(join(dst.dir, "big.bin")).equals(big)).toBe(true);
    for (const i of [0, 150, 299]) expect(readFileSync(join(dst.dir, `d${i % 7}`, `f${i}.txt`), "utf8")).toBe(`file ${i}\n`.repeat(i + 1));
    expect(existsSync(join(dst.dir, "pipe"))).toBe(false);
    expect(result.entries).toBe(1 + 300 + 7 + 1);
  });

  const cases: Array<[string, Buffer, string]> = [
    ["a ../ path", tarEntry("../evil.txt", { body: "pwned" }), "path contains .."],
    ["a nested ../ path", tarEntry("ok/../../evil.txt", { body: "pwned" }), "path contains .."],
    ["an absolute path", tarEntry("/tmp/paddock-evil-abs.txt", { body: "pwned" }), "absolute path"],
    ["a symlink out of the workspace", tarEntry("escape", { type: "2", linkname: "../../" }), "link escapes the workspace"],
    ["an absolute symlink", tarEntry("etc", { type: "2", linkname: "/etc" }), "absolute link target"],
    ["a hard link out of the workspace", tarEntry("hard", { type: "1", linkname: "../evil.txt" }), "link escapes the workspace"],
    ["a character device", tarEntry("null", { type: "3" }), "unsupported entry type CharacterDevice"],
  ];

  for (const [label, entry, reason] of cases) {
    it(`refuses ${label} and writes nothing outside`, async () => {
      const { root, dir } = sandbox();
      const archive = maliciousTar(tarEntry("fine.txt", { body: "ok" }), entry, tarEntry("after.txt", { body: "late" }));
      const err = await extractArchive(Readable.from([archive]), dir).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ArchiveRefusedError);
      expect((err as Error).message).toBe(`archive refused: ${reason}`);
      expect(existsSync(join(root, "evil.txt"))).toBe(false);
      expect(existsSync("/tmp/paddock-evil-abs.txt")).toBe(false);
      expect(existsSync(join(dir, "escape"))).toBe(false);
      expect(existsSync(join(dir, "after.txt"))).toBe(false);
    });
  }

  it("refuses bytes that are not a gzipped tar", async () => {
    const { dir } = sandbox();
    await expect(extractArchive(Readable.from([Buffer.from("not an archive at all")]), dir)).rejects.toBeInstanceOf(ArchiveRefusedError);
  });
});
