import { afterEach, describe, expect, it } from "vitest";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeTar } from "./tar-writer.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("writeTar", () => {
  it("writes ustar that GNU tar reads back: files, directories, links, and a name past 100 bytes", () => {
    const dir = mkdtempSync(join(tmpdir(), "paddock-tar-"));
    dirs.push(dir);
    const long = `${"d".repeat(60)}/${"e".repeat(60)}/file.txt`;
    writeFileSync(
      join(dir, "a.tar"),
      writeTar([
        { path: "d", type: "dir" },
        { path: "d/x", type: "file", content: "hello", mode: 0o600 },
        { path: "d/link", type: "symlink", linkname: "x" },
        { path: "d/hard", type: "hardlink", linkname: "d/x" },
        { path: `${"d".repeat(60)}`, type: "dir" },
        { path: `${"d".repeat(60)}/${"e".repeat(60)}`, type: "dir" },
        { path: long, type: "file", content: "deep" },
      ]),
    );
    const out = join(dir, "out");
    spawnSync("mkdir", [out]);
    const r = spawnSync("tar", ["-xf", join(dir, "a.tar"), "-C", out], { encoding: "utf8" });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(readFileSync(join(out, "d/x"), "utf8")).toBe("hello");
    expect(readlinkSync(join(out, "d/link"))).toBe("x");
    expect(readFileSync(join(out, "d/hard"), "utf8")).toBe("hello");
    expect(readFileSync(join(out, long), "utf8")).toBe("deep");
  });

  it("refuses a name that fits no ustar split", () => {
    expect(() => writeTar([{ path: "x".repeat(300), type: "file", content: "" }])).toThrow(/too long/);
  });
});
