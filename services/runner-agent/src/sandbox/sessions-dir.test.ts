import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { silentLogger } from "@paddock/logging";
import { markTopDirectory, prepareSessionsDir } from "./sessions-dir.ts";

const scratch: string[] = [];
afterEach(() => {
  for (const dir of scratch.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Whether lsattr shows the top-directory flag (`T`) on dir; undefined where lsattr cannot read flags here. */
function topFlag(dir: string): boolean | undefined {
  try {
    const flags = execFileSync("lsattr", ["-d", dir], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).split(" ")[0] ?? "";
    return flags.includes("T");
  } catch {
    return undefined;
  }
}

describe("the sessions directory", () => {
  it("is marked a top directory exactly where the filesystem keeps the attribute", async () => {
    const dir = mkdtempSync(join(tmpdir(), "paddock-topdir-"));
    scratch.push(dir);
    expect(topFlag(dir)).not.toBe(true);
    const marked = await markTopDirectory(dir);
    // Where flags are readable, the answer matches what is on disk; elsewhere it says not marked.
    expect(topFlag(dir) ?? false).toBe(marked);
  });

  it("reports a path that is not there as not marked, without throwing", async () => {
    expect(await markTopDirectory(join(tmpdir(), "paddock-no-such-dir", "sessions"))).toBe(false);
  });

  it("is emptied of what a previous process left, made again and marked like a fresh one", async () => {
    const base = mkdtempSync(join(tmpdir(), "paddock-sessions-"));
    scratch.push(base);
    const dir = join(base, "sessions");
    mkdirSync(join(dir, "old-session", "workspace"), { recursive: true });
    writeFileSync(join(dir, "old-session", "workspace", "file"), "left over");
    await prepareSessionsDir(dir, silentLogger());
    expect(existsSync(join(dir, "old-session"))).toBe(false);
    expect(existsSync(dir)).toBe(true);
    const probe = join(base, "probe");
    mkdirSync(probe);
    expect(topFlag(dir) ?? false).toBe(await markTopDirectory(probe));
  });
});
