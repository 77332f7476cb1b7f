import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { silentLogger } from "@paddock/logging";
import { scratchDirs } from "@paddock/testing";
import { afterEach, describe, expect, it } from "vitest";
import { DISCARDED_PREFIX, removeDirSoon } from "./remove-dir.ts";

const dirs = scratchDirs("paddock-rmdir-");
const sessionsDir = dirs.make;
afterEach(dirs.removeAll);

describe("removeDirSoon", () => {
  it("frees the path at once and deletes the contents in the background", async () => {
    const sessions = sessionsDir();
    const dir = join(sessions, "ses_1");
    mkdirSync(join(dir, "workspace", "deep"), { recursive: true });
    for (let i = 0; i < 50; i++) writeFileSync(join(dir, "workspace", "deep", `f${i}`), "x".repeat(1000));
    const { deleted } = await removeDirSoon(dir, silentLogger());
    // The path is free for a resume on this runner before the bytes are gone.
    expect(existsSync(dir)).toBe(false);
    mkdirSync(dir);
    await deleted;
    expect(readdirSync(sessions)).toEqual(["ses_1"]);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("names the aside directory so that it is never taken for a session", async () => {
    const sessions = sessionsDir();
    const dir = join(sessions, "ses_2");
    mkdirSync(dir);
    // Resumed right after the rename, in the same microtask checkpoint: the delete
    // (a pool round trip at least) cannot have finished, so the aside entry is there.
    const { deleted } = await removeDirSoon(dir, silentLogger());
    const during = readdirSync(sessions);
    expect(during).toHaveLength(1);
    expect(during[0]).toMatch(new RegExp(`^${DISCARDED_PREFIX}ses_2-[0-9a-f-]{36}$`));
    await deleted;
    expect(readdirSync(sessions)).toEqual([]);
  });

  it("settles for a directory that does not exist", async () => {
    const sessions = sessionsDir();
    const { deleted } = await removeDirSoon(join(sessions, "gone"), silentLogger());
    await deleted;
    expect(readdirSync(sessions)).toEqual([]);
  });
});
