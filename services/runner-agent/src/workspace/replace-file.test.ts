import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DirFd, UnsafePathError } from "@paddock/archive";
import { createLogger } from "@paddock/logging";
import { FS_EXCHANGE_ADDON_PATH } from "../config.ts";
import { exchangeInto, fileReplacer, renameInto } from "./replace-file.ts";

// `npm test` builds the addon (scripts/bootstrap.mjs); without it these tests say so rather than pass.
const addon = createRequire(import.meta.url)(FS_EXCHANGE_ADDON_PATH) as { exchange: (dirfd: number, a: string, b: string) => number };

let root: string;
let dir: DirFd;
let calls: number;
const counted = (dirfd: number, a: string, b: string) => {
  calls++;
  return addon.exchange(dirfd, a, b);
};

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "paddock-replace-"));
  dir = DirFd.open(root, { follow: false });
  calls = 0;
});
afterEach(() => {
  dir.close();
  rmSync(root, { recursive: true, force: true });
});

describe("a written file takes its path's place by exchange", () => {
  it("replaces a file: the new one at the path, the old inode gone, no other name left", () => {
    writeFileSync(join(root, "f"), "old");
    writeFileSync(join(root, ".tmp"), "new");
    const newInode = lstatSync(join(root, ".tmp")).ino;
    exchangeInto(counted)(dir, ".tmp", "f");
    expect(calls).toBe(1);
    expect(readFileSync(join(root, "f"), "utf8")).toBe("new");
    expect(lstatSync(join(root, "f")).ino).toBe(newInode);
    expect(readdirSync(root)).toEqual(["f"]);
  });

  it("replaces a symlink without following it", () => {
    writeFileSync(join(root, "target"), "keep");
    symlinkSync(join(root, "target"), join(root, "link"));
    writeFileSync(join(root, ".tmp"), "new");
    exchangeInto(counted)(dir, ".tmp", "link");
    expect(lstatSync(join(root, "link")).isFile()).toBe(true);
    expect(readFileSync(join(root, "link"), "utf8")).toBe("new");
    expect(readFileSync(join(root, "target"), "utf8")).toBe("keep");
    expect(readdirSync(root).sort()).toEqual(["link", "target"]);
  });

  it("renames where nothing is at the path yet", () => {
    writeFileSync(join(root, ".tmp"), "new");
    exchangeInto(counted)(dir, ".tmp", "fresh");
    expect(readFileSync(join(root, "fresh"), "utf8")).toBe("new");
    expect(readdirSync(root)).toEqual(["fresh"]);
  });

  it("refuses a directory at the path (made there after the caller looked), and puts it back whole", () => {
    mkdirSync(join(root, "d"));
    writeFileSync(join(root, "d", "inside"), "x");
    writeFileSync(join(root, ".tmp"), "new");
    expect(() => exchangeInto(counted)(dir, ".tmp", "d")).toThrow(UnsafePathError);
    expect(lstatSync(join(root, "d")).isDirectory()).toBe(true);
    expect(readFileSync(join(root, "d", "inside"), "utf8")).toBe("x");
    // The written file is back under its temporary name, for the writer to remove.
    expect(readFileSync(join(root, ".tmp"), "utf8")).toBe("new");
    // The rename refuses it too.
    expect(() => renameInto(dir, ".tmp", "d")).toThrow(/EISDIR|ENOTDIR|EEXIST|ENOTEMPTY/);
  });

  it("fails when the written file is gone (the sandbox removed it), leaving the path as it was", () => {
    writeFileSync(join(root, "f"), "old");
    expect(() => exchangeInto(counted)(dir, ".tmp", "f")).toThrow(/ENOENT/);
    expect(readFileSync(join(root, "f"), "utf8")).toBe("old");
  });

  it("the addon takes single names only: a slash, NUL, dot-dot, empty or overlong name, or a bad descriptor is refused", () => {
    writeFileSync(join(root, "a"), "a");
    writeFileSync(join(root, "b"), "b");
    for (const [a, b] of [["a/x", "b"], ["a\0", "b"], ["..", "b"], ["", "b"], ["a", "x".repeat(256)]] as const) expect(addon.exchange(dir.fd, a, b)).toBeLessThan(0);
    expect(addon.exchange(-1, "a", "b")).toBeLessThan(0);
    expect([readFileSync(join(root, "a"), "utf8"), readFileSync(join(root, "b"), "utf8")]).toEqual(["a", "b"]);
  });
});

describe("the runner's replacer", () => {
  it("is the exchange when the addon loads, and the rename (said once in the log) when it does not", () => {
    const lines: string[] = [];
    const log = createLogger({ service: "test", level: "warn", destination: { write: (line: string) => lines.push(line) } as unknown as NodeJS.WritableStream });
    expect(fileReplacer(FS_EXCHANGE_ADDON_PATH, log)).not.toBe(renameInto);
    expect(lines).toEqual([]);
    const missing = join(root, "no-such-addon.node");
    expect(fileReplacer(missing, log)).toBe(renameInto);
    expect(lines.join("")).toContain("file writes replace by rename");
    writeFileSync(join(root, "f"), "old");
    writeFileSync(join(root, ".tmp"), "new");
    fileReplacer(FS_EXCHANGE_ADDON_PATH, log)(dir, ".tmp", "f");
    expect(readdirSync(root)).toEqual(["f"]);
    expect(readFileSync(join(root, "f"), "utf8")).toBe("new");
  });
});
